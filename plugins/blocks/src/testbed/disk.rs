//! When blocks reach the disk tier (`cache.disk_writes`): a whole block once, when stored; a
//! partial block once, when it leaves DRAM, however many range fills grew it.

use std::sync::Arc;
use std::time::Duration;

use super::{pattern, settings, Bed, BS};
use crate::cache::Fill;

const B: usize = BS as usize;

async fn bed(every_insert: bool) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), 64 << 20);
    s.fill = Fill::Range;
    s.data.write_every_insert = every_insert;
    s.meta.write_every_insert = every_insert;
    Bed::with(dir, s, Arc::new(super::origin::MemOrigin::default())).await
}

/// What a wait for pending writes (and a flush of DRAM entries) costs the disk tier by
/// itself: foyer writes out its current page.
const SETTLE_PAGE: usize = 4096;

/// Bytes the data store's disk tier wrote once its pending writes are done (including one
/// [`SETTLE_PAGE`] for the wait).
async fn written(bed: &Bed) -> usize {
    // Paused time: let spawned fills finish, then the disk writes they queued.
    tokio::time::sleep(Duration::from_secs(5)).await;
    bed.cache.settle().await;
    bed.cache.data.statistics().disk_write_bytes()
}

/// Grows one block by `spans` disjoint range fills; returns the bytes it then holds and the
/// data tier's bytes written before the fills.
async fn grow(bed: &Bed, key: &str, spans: usize) -> (usize, usize) {
    let body = pattern(3, 2 * B);
    bed.origin.put(key, body.clone());
    bed.head(key).await.unwrap();
    let before = written(bed).await;
    for i in 0..spans {
        let at = i * 8000;
        let r = bed
            .get(key, Some(&format!("bytes={at}-{}", at + 3999)))
            .await
            .unwrap();
        assert!(r.bytes() == &body.slice(at..at + 4000));
    }
    (spans * 4000, before)
}

#[tokio::test(start_paused = true)]
async fn a_block_grown_by_range_fills_is_written_once_when_it_leaves_dram() {
    let bed = bed(false).await;
    let (held, before) = grow(&bed, "data/p.bin", 6).await;
    let grown = written(&bed).await;
    assert_eq!(grown, before + SETTLE_PAGE, "a growing block stays in DRAM");
    bed.cache.write_partials().await;
    let once = written(&bed).await;
    // One write of the spans it held (foyer pads entries to pages; every_insert writes 3x+).
    let block = once - grown - 2 * SETTLE_PAGE;
    assert!(
        block >= held && block <= held + 3 * SETTLE_PAGE,
        "{block} bytes for {held} held"
    );
    // Read back from disk and left again unchanged: not rewritten.
    let r = bed.get("data/p.bin", Some("bytes=0-3999")).await.unwrap();
    assert_eq!(r.label(), "hit");
    bed.cache.write_partials().await;
    assert_eq!(written(&bed).await, once + 2 * SETTLE_PAGE);
}

#[tokio::test(start_paused = true)]
async fn every_insert_writes_the_block_at_each_fill() {
    let bed = bed(true).await;
    let (held, before) = grow(&bed, "data/p.bin", 6).await;
    let all = written(&bed).await - before;
    // 4000 + 8000 + ... + 24000 bytes: each merge rewrote the block.
    assert!(all >= 3 * held, "{all} bytes for {held} held");
}

#[tokio::test(start_paused = true)]
async fn a_whole_block_is_written_when_stored_and_not_again() {
    let bed = bed(false).await;
    let body = pattern(4, B);
    bed.origin.put("data/w.bin", body.clone());
    bed.head("data/w.bin").await.unwrap();
    let before = written(&bed).await;
    let r = bed.get("data/w.bin", None).await.unwrap();
    assert!(r.bytes() == &body);
    let stored = written(&bed).await;
    assert!(
        stored - before >= B && stored - before <= B + 16384,
        "{stored} - {before}"
    );
    bed.cache.write_partials().await;
    assert_eq!(written(&bed).await, stored + 2 * SETTLE_PAGE);
}
