//! The block cache's races, driven deterministically: paused time, a scripted origin, and
//! assertions on bytes and origin request counts. Each test names the end-to-end test in
//! tests/ it backs.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::origin::{Fault, MemOrigin};
use super::{pattern, Bed, Collect, Read, BS};
use floe_core::OriginError;

const B: usize = BS as usize;

/// Asserts equal bytes without printing megabytes when they differ.
#[track_caller]
fn same(got: &[u8], want: &[u8]) {
    let diff = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(
        got == want,
        "{} bytes where {} were expected; first difference at {diff:?}",
        got.len(),
        want.len()
    );
}

fn range(first: usize, last: usize) -> String {
    format!("bytes={first}-{last}")
}

/// With paused time a sleep returns only once every other task is idle: spawned stores and
/// merges have run.
async fn quiesce() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Backs test_sixteen_cold_gets_make_one_origin_get.
#[tokio::test(start_paused = true)]
async fn sixteen_cold_readers_of_one_object_make_one_origin_get() {
    let bed = Bed::new().await;
    let body = pattern(1, 3 * B + 100);
    bed.origin.put("data/a.bin", body.clone());
    let reads = join_all((0..16).map(|_| bed.get("data/a.bin", None))).await;
    for r in reads {
        same(r.unwrap().bytes(), &body);
    }
    let (heads, gets, bytes) = bed.origin.counts();
    assert_eq!((heads, gets, bytes), (0, 1, body.len() as u64));
    let again = bed.get("data/a.bin", None).await.unwrap();
    assert_eq!((again.label(), bed.origin.counts().1), ("hit", 1));
}

/// Backs test_engines_cold_and_warm_match_direct (one GET per run of adjacent misses).
#[tokio::test(start_paused = true)]
async fn a_run_of_adjacent_missing_blocks_is_one_ranged_get() {
    let bed = Bed::new().await;
    let body = pattern(2, 6 * B);
    bed.origin.put("data/run.bin", body.clone());
    bed.head("data/run.bin").await.unwrap();
    let r = bed
        .get("data/run.bin", Some(&range(10, 4 * B + 9)))
        .await
        .unwrap();
    same(r.bytes(), &body.slice(10..4 * B + 10));
    assert_eq!(bed.origin.counts(), (1, 1, 4 * B as u64));
    let r = bed
        .get("data/run.bin", Some(&range(10, 4 * B + 9)))
        .await
        .unwrap();
    assert_eq!((r.label(), bed.origin.counts().1), ("hit", 1));
}

/// A cached tail in the middle of a run is fetched again rather than split the run in two
/// GETs. Backs test_a_run_refetches_a_cached_tail_instead_of_a_second_get.
#[tokio::test(start_paused = true)]
async fn a_cached_tail_inside_a_run_costs_no_second_get() {
    let bed = Bed::new().await;
    let body = pattern(3, 4 * B);
    bed.origin.put("data/tail.bin", body.clone());
    bed.head("data/tail.bin").await.unwrap();
    let tail = bed
        .get("data/tail.bin", Some(&range(B - 1000, B - 1)))
        .await;
    same(tail.unwrap().bytes(), &body.slice(B - 1000..B));
    assert_eq!(bed.origin.counts().1, 1);
    let r = bed
        .get("data/tail.bin", Some(&range(0, 3 * B - 1)))
        .await
        .unwrap();
    same(r.bytes(), &body.slice(0..3 * B));
    assert_eq!(
        bed.origin.counts().1,
        2,
        "one GET for blocks 0..=2 despite block 0's tail"
    );
}

/// An object rewritten while a fill streams: the fill's body is of the version it asked for,
/// so the read is that version whole, never a mix. Backs test_no_response_mixes_versions.
#[tokio::test(start_paused = true)]
async fn a_rewrite_during_a_fill_never_mixes_versions() {
    let bed = Arc::new(Bed::new().await);
    let v1 = pattern(4, 3 * B);
    bed.origin.put("data/w.bin", v1.clone());
    bed.head("data/w.bin").await.unwrap();
    let (reached, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    bed.origin.fault(Fault::Hold {
        after: B + 17,
        reached: reached.clone(),
        release: release.clone(),
    });
    let b2 = bed.clone();
    let read = tokio::spawn(async move { b2.get("data/w.bin", None).await });
    reached.notified().await;
    let v2 = pattern(5, 3 * B);
    bed.origin.put("data/w.bin", v2.clone());
    release.notify_one();
    same(read.await.unwrap().unwrap().bytes(), &v1);
}

/// A rewritable object whose cached mapping went stale: the fill's If-Match fails, the
/// response is cut after the old version's cached bytes (never finished with new bytes), the
/// mapping is dropped, and the next read serves the new version whole.
/// Backs test_overwrite_through_floe_is_seen and test_no_response_mixes_versions.
#[tokio::test(start_paused = true)]
async fn an_etag_change_mid_read_cuts_the_response_and_re_resolves() {
    let bed = Bed::new().await;
    let v1 = pattern(6, 3 * B);
    bed.origin.put("m/x.bin", v1.clone());
    let first = bed.get("m/x.bin", Some(&range(0, B - 1))).await.unwrap();
    same(first.bytes(), &v1.slice(0..B));
    let v2 = pattern(7, 3 * B);
    bed.origin.put("m/x.bin", v2.clone());
    let mut sink = Collect::default();
    let cut = bed.get_into("m/x.bin", None, &mut sink).await;
    assert!(cut.is_err(), "a response mixing versions was completed");
    assert!(
        v1.starts_with(&sink.bytes),
        "bytes of another version were sent"
    );
    let fresh = bed.get("m/x.bin", None).await.unwrap();
    same(fresh.bytes(), &v2);
}

/// A fill cut short by the origin: the reader that started it fails (its client must see a
/// broken transfer, not a short body), and a reader waiting on one of its blocks fails over
/// to a fill of its own. Backs test_reset_mid_get_fails_the_transfer.
#[tokio::test(start_paused = true)]
async fn a_dying_fill_fails_its_reader_and_its_waiters_fail_over() {
    let bed = Arc::new(Bed::new().await);
    let body = pattern(8, 3 * B);
    bed.origin.put("data/d.bin", body.clone());
    bed.head("data/d.bin").await.unwrap();
    bed.origin.fault(Fault::Short(B + 100));
    let a = bed.clone();
    let starter = tokio::spawn(async move {
        let mut sink = Collect::default();
        let r = a.get_into("data/d.bin", None, &mut sink).await;
        (r, sink.bytes)
    });
    bed.origin.get_started.notified().await;
    let waiter = bed
        .get("data/d.bin", Some(&range(2 * B + 5, 2 * B + 900)))
        .await;
    same(waiter.unwrap().bytes(), &body.slice(2 * B + 5..2 * B + 901));
    let (r, sent) = starter.await.unwrap();
    assert!(r.is_err(), "a cut fill was served as a whole body");
    assert!(sent.len() < body.len() && body.starts_with(&sent));
    assert_eq!(
        bed.origin.counts().1,
        2,
        "the waiter made one GET of its own"
    );
    let whole = bed.get("data/d.bin", None).await.unwrap();
    same(whole.bytes(), &body);
}

/// Cut-through: a slow client reading the fill it started does not slow the fill, so a fast
/// reader of the same blocks finishes first, and the blocks are stored for later hits.
#[tokio::test(start_paused = true)]
async fn a_slow_client_does_not_hold_back_the_fill_it_started() {
    let bed = Arc::new(Bed::new().await);
    let body = pattern(9, 4 * B);
    bed.origin.put("data/s.bin", body.clone());
    bed.head("data/s.bin").await.unwrap();
    let a = bed.clone();
    let slow = tokio::spawn(async move {
        let mut sink = Collect {
            delay: Duration::from_millis(50),
            ..Collect::default()
        };
        let r = a.get_into("data/s.bin", None, &mut sink).await;
        (r.map(|r| r.bytes().clone()), Instant::now())
    });
    bed.origin.get_started.notified().await;
    let fast = bed.get("data/s.bin", None).await.unwrap();
    let fast_done = Instant::now();
    same(fast.bytes(), &body);
    let (slow_bytes, slow_done) = slow.await.unwrap();
    assert_eq!(slow_bytes.unwrap(), body);
    assert!(
        fast_done < slow_done,
        "the fast reader waited on the slow client"
    );
    assert_eq!(bed.origin.counts().1, 1);
    let hit = bed.get("data/s.bin", None).await.unwrap();
    assert_eq!((hit.label(), bed.origin.counts().1), ("hit", 1));
}

/// Parallel reads of different ranges of one cold block all get their bytes, and what they
/// fetched is merged into the block. Backs test_contended_block_serves_every_read.
#[tokio::test(start_paused = true)]
async fn parallel_readers_of_one_block_all_get_their_bytes() {
    let bed = Bed::new().await;
    let body = pattern(10, 2 * B);
    bed.origin.put("data/p.bin", body.clone());
    bed.head("data/p.bin").await.unwrap();
    let ranges: Vec<(usize, usize)> = (0..8).map(|i| (i * 8000 + 7, i * 8000 + 3000)).collect();
    let headers: Vec<String> = ranges.iter().map(|&(a, z)| range(a, z)).collect();
    let reads = join_all(headers.iter().map(|h| bed.get("data/p.bin", Some(h)))).await;
    for (r, &(a, z)) in reads.into_iter().zip(&ranges) {
        same(r.unwrap().bytes(), &body.slice(a..=z));
    }
    quiesce().await;
    let gets = bed.origin.counts().1;
    assert!(gets <= 8, "{gets} GETs for 8 reads");
    for &(a, z) in &ranges {
        let r = bed.get("data/p.bin", Some(&range(a, z))).await.unwrap();
        same(r.bytes(), &body.slice(a..=z));
        assert_eq!(r.label(), "hit", "range {a}-{z} was not kept");
    }
    assert_eq!(bed.origin.counts().1, gets);
}

/// Under DRAM pressure a data block touched once is not admitted; touched twice it is.
/// Backs test_scan_cannot_evict_hot_set_or_metadata.
#[tokio::test(start_paused = true)]
async fn admission_under_pressure_needs_a_second_touch() {
    let dir = tempfile::tempdir().unwrap();
    let s = super::settings(dir.path(), 4 * B);
    let bed = Bed::with(dir, s, Arc::new(MemOrigin::default())).await;
    let scan = pattern(11, 12 * B);
    bed.origin.put("data/scan.bin", scan.clone());
    same(bed.get("data/scan.bin", None).await.unwrap().bytes(), &scan);
    let rejected = || {
        bed.cache
            .data_stats
            .rejected
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert!(
        rejected() > 0,
        "a one-touch scan filled a DRAM under pressure"
    );
    let hot = pattern(12, B);
    bed.origin.put("data/hot.bin", hot.clone());
    let before = rejected();
    assert_eq!(bed.get("data/hot.bin", None).await.unwrap().label(), "miss");
    assert_eq!(
        rejected(),
        before + 1,
        "first touch under pressure is not admitted"
    );
    assert_eq!(bed.get("data/hot.bin", None).await.unwrap().label(), "miss");
    let third = bed.get("data/hot.bin", None).await.unwrap();
    assert_eq!((third.label(), third.bytes()), ("hit", &hot));
}

/// A data block a peer owns is kept here while the store has room and not under pressure,
/// however often it was read here, so three nodes read evenly hold three nodes' worth of
/// blocks, not one node's. Other stores keep replicas subject to admission alone.
#[tokio::test(start_paused = true)]
async fn a_replica_is_kept_only_while_the_store_has_room() {
    use crate::classify::Store;
    let dir = tempfile::tempdir().unwrap();
    let s = super::settings(dir.path(), 4 * B);
    let bed = Bed::with(dir, s, Arc::new(MemOrigin::default())).await;
    let key = crate::store::BlockKey {
        bucket: Arc::from(super::BUCKET),
        key: Arc::from("data/theirs.bin"),
        etag: Arc::from("e1"),
        block_bytes: BS as u32,
        index: 0,
    };
    let keeps = |s| bed.cache.keeps_replica(&key, s, B);
    assert!(keeps(Store::Data), "a store with room keeps a replica");
    let scan = pattern(14, 12 * B);
    bed.origin.put("data/scan.bin", scan.clone());
    same(bed.get("data/scan.bin", None).await.unwrap().bytes(), &scan);
    for _ in 0..15 {
        bed.cache.sketch.touch(key.stable_hash());
    }
    assert!(
        !keeps(Store::Data),
        "under pressure a replica is not kept, hot or not"
    );
    assert!(keeps(Store::Metadata), "the metadata store keeps replicas");
}

/// An immutable object's mapping and blocks survive a restart: no HEAD, no GET.
/// Backs test_restart_serves_warm_set_without_origin_and_refetches_corrupt_blocks.
#[tokio::test(start_paused = true)]
async fn persisted_mappings_are_recovered_after_a_restart() {
    let bed = Bed::new().await;
    let body = pattern(13, 2 * B + 3);
    bed.origin.put("meta/r.json", body.clone());
    same(bed.get("meta/r.json", None).await.unwrap().bytes(), &body);
    let settings = bed.cache.settings.clone();
    let (dir, origin) = bed.close().await;
    let before = origin.counts();
    let again = Bed::with(dir, settings, origin).await;
    let r = again.get("meta/r.json", None).await.unwrap();
    assert_eq!((r.label(), r.bytes()), ("hit", &body));
    assert_eq!(again.origin.counts(), before);
}

/// A key the origin no longer has is passed to the origin (which answers 404), and a
/// resolving GET that fails passes too rather than answering an error of its own.
#[tokio::test(start_paused = true)]
async fn missing_keys_and_origin_errors_pass_to_the_origin() {
    let bed = Bed::new().await;
    assert_eq!(bed.get("data/none.bin", None).await.unwrap(), Read::Pass);
    bed.origin.put("data/e.bin", pattern(14, 10));
    bed.origin.fault(Fault::Fail(OriginError::Status(500)));
    assert_eq!(bed.get("data/e.bin", None).await.unwrap(), Read::Pass);
    same(
        bed.get("data/e.bin", None).await.unwrap().bytes(),
        &pattern(14, 10),
    );
}

/// A key deleted at the origin while its mapping is cached: the first block's fill (If-Match)
/// finds nothing before any header went out, so the read re-resolves and passes to the origin
/// (which answers 404) instead of a 200 cut short; and so does the next.
#[tokio::test(start_paused = true)]
async fn a_key_deleted_under_a_read_passes_to_the_origin_before_any_header() {
    let bed = Bed::new().await;
    let body = pattern(15, 2 * B);
    bed.origin.put("m/gone.bin", body.clone());
    bed.head("m/gone.bin").await.unwrap();
    bed.origin.delete("m/gone.bin");
    let mut sink = Collect::default();
    assert_eq!(
        bed.get_into("m/gone.bin", None, &mut sink).await.unwrap(),
        Read::Pass
    );
    assert!(sink.bytes.is_empty());
    assert_eq!(bed.get("m/gone.bin", None).await.unwrap(), Read::Pass);
}

/// A key overwritten at the origin while its old mapping is cached: the first block's fill
/// (If-Match on the old ETag) fails before any header went out, so the read re-resolves and
/// answers the new version whole, never a 200 cut short (the soak's overwrites found this).
#[tokio::test(start_paused = true)]
async fn a_key_overwritten_under_a_read_answers_the_new_version_not_a_cut_body() {
    let bed = Bed::new().await;
    bed.origin.put("m/moved.bin", pattern(16, 2 * B));
    bed.head("m/moved.bin").await.unwrap();
    let new = pattern(17, 2 * B);
    bed.origin.put("m/moved.bin", new.clone());
    let mut sink = Collect::default();
    let read = bed
        .get_into("m/moved.bin", Some("bytes=0-65535"), &mut sink)
        .await
        .unwrap();
    assert!(matches!(read, Read::Served { .. }), "{read:?}");
    same(read.bytes(), &new[..65536]);
}

/// A range across a block seam whose first block is cached and whose second is not, read after
/// the key was overwritten at the origin: the second block's fill (If-Match on the old ETag)
/// fails before any header went out, so the read answers the new version whole rather than a
/// 206 cut short after the first block's bytes (the soak's overwrites found this one too).
#[tokio::test(start_paused = true)]
async fn a_range_across_a_seam_overwritten_under_it_answers_the_new_version_not_a_cut_body() {
    let bed = Bed::new().await;
    bed.origin.put("m/seam.bin", pattern(18, 2 * B));
    let tail = format!("bytes={}-{}", B / 2, B - 1);
    bed.get("m/seam.bin", Some(&tail)).await.unwrap();
    bed.cache.settle().await;
    let new = pattern(19, 2 * B);
    bed.origin.put("m/seam.bin", new.clone());
    let across = format!("bytes={}-{}", B / 2, B + B / 2 - 1);
    let mut sink = Collect::default();
    let read = bed
        .get_into("m/seam.bin", Some(&across), &mut sink)
        .await
        .unwrap();
    assert!(matches!(read, Read::Served { .. }), "{read:?}");
    same(read.bytes(), &new[B / 2..B + B / 2]);
}
