//! What a response's header says about where its bytes came from: the `x-floe-cache` label
//! and `x-floe-origin-bytes`, against what the scripted origin really sent. A byte the origin
//! sent is counted by one response, the one whose fill fetched it. Backs
//! test_concurrent_cold_reads_tell_where_their_bytes_came_from (tests/test_blocks.py) and
//! the fleet's test_sixty_four_cold_requests_over_three_nodes_make_one_origin_get.

use std::sync::Arc;

use futures::future::join_all;

use super::origin::Fault;
use super::{pattern, Bed, Read, BS};

const B: usize = BS as usize;

fn sums(reads: &[Read]) -> (u64, u64) {
    reads.iter().fold((0, 0), |(h, x), r| {
        let (header, exact) = r.origin();
        (h + header, x + exact)
    })
}

/// Sixteen cold readers of one object: one fetched it ("miss", every origin byte), the others
/// waited on its fill ("wait", none) or found it cached ("hit", none).
#[tokio::test(start_paused = true)]
async fn concurrent_cold_readers_count_the_origin_bytes_once() {
    let bed = Bed::new().await;
    let body = pattern(11, 3 * B + 100);
    bed.origin.put("data/c.bin", body.clone());
    let reads: Vec<Read> = join_all((0..16).map(|_| bed.get("data/c.bin", None)))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let sent = bed.origin.counts().2;
    assert_eq!(sent, body.len() as u64);
    let labels: Vec<&str> = reads.iter().map(Read::label).collect();
    assert_eq!(
        labels.iter().filter(|l| **l == "miss").count(),
        1,
        "{labels:?}"
    );
    assert!(
        labels.iter().all(|l| ["miss", "wait", "hit"].contains(l)),
        "{labels:?}"
    );
    assert!(labels.contains(&"wait"), "{labels:?}");
    for r in &reads {
        assert_eq!(r.bytes(), &body);
        if r.label() != "miss" {
            assert_eq!(r.origin(), (0, 0), "{}", r.label());
        }
    }
    assert_eq!(sums(&reads), (sent, sent));
}

/// A read whose first block is cached and whose second is not: the header, written after the
/// first block, already says "partial" and names the bytes the second block's fill fetches.
#[tokio::test(start_paused = true)]
async fn a_cached_first_block_and_a_missing_second_say_partial() {
    let bed = Bed::new().await;
    let body = pattern(12, 3 * B);
    bed.origin.put("data/p.bin", body.clone());
    let first = bed
        .get("data/p.bin", Some(&format!("bytes=0-{}", B - 1)))
        .await;
    assert_eq!(first.unwrap().origin(), (B as u64, B as u64));
    let before = bed.origin.counts().2;
    let r = bed
        .get("data/p.bin", Some(&format!("bytes=100-{}", B + 999)))
        .await
        .unwrap();
    assert_eq!(r.bytes(), &body.slice(100..B + 1000));
    let sent = bed.origin.counts().2 - before;
    assert_eq!((r.label(), r.origin()), ("partial", (sent, sent)));
    assert_eq!(sent, 1000);
}

/// A fill cut short: its waiter fetches the block itself. Every byte the origin sent is
/// counted by exactly one response, the cut one included.
#[tokio::test(start_paused = true)]
async fn a_waiter_that_fails_over_counts_what_it_fetched() {
    let bed = Arc::new(Bed::new().await);
    let body = pattern(13, 2 * B);
    bed.origin.put("data/f.bin", body.clone());
    bed.head("data/f.bin").await.unwrap();
    bed.origin.fault(Fault::Short(B / 2));
    let a = bed.clone();
    let starter = tokio::spawn(async move { a.get("data/f.bin", None).await });
    bed.origin.get_started.notified().await;
    let waiter = bed.get("data/f.bin", None).await.unwrap();
    assert_eq!(waiter.bytes(), &body);
    assert!(starter.await.unwrap().is_err(), "a cut fill served whole");
    // The starter's log line counts what its cut fill got; the waiter fetched the rest itself.
    let (_, gets, sent) = bed.origin.counts();
    assert_eq!(gets, 2);
    assert_eq!(
        waiter.label(),
        "miss",
        "its wait brought nothing: it fetched every byte"
    );
    assert_eq!(waiter.origin().1, 2 * B as u64);
    assert_eq!(sent, (B / 2 + 2 * B) as u64);
}
