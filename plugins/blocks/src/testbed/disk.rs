//! What reaches the disk tier and what is read back (see [`crate::pages`]): a whole block's
//! pages once, when it is stored; a partial block's complete pages once, when it leaves DRAM
//! (or at each fill with `cache.disk_writes: every_insert`), however many range fills grew it;
//! a read that misses DRAM loads only the pages of its range.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::{pattern, settings, Bed, BS};
use crate::cache::Fill;
use crate::pages::page_bytes;

const B: usize = BS as usize;

async fn bed(every_insert: bool) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), 64 << 20);
    s.fill = Fill::Range;
    s.data.write_every_insert = every_insert;
    s.meta.write_every_insert = every_insert;
    Bed::with(dir, s, Arc::new(super::origin::MemOrigin::default())).await
}

/// foyer's alignment: each entry (a page, its key and header) is padded to this, a written
/// batch carries an index of this size, and a wait for pending writes writes out the current
/// one. With 8 KiB test pages that is up to 2x; with 256 KiB pages (2 MiB blocks), about 3%.
const ALIGN: usize = 4096;

fn page() -> usize {
    page_bytes(BS as u32) as usize
}

/// Bytes the data store's disk tier wrote once its pending writes are done.
async fn written(bed: &Bed) -> usize {
    // Paused time: let spawned fills finish, then the disk writes they queued.
    tokio::time::sleep(Duration::from_secs(5)).await;
    bed.cache.settle().await;
    bed.cache.data.statistics().disk_write_bytes()
}

fn read_from_disk(bed: &Bed) -> usize {
    bed.cache.data.statistics().disk_read_bytes()
}

fn pages_written(bed: &Bed) -> u64 {
    let events = &bed.cache.data_stats.events;
    events.pages.written.load(Relaxed)
}

/// Range fills of two pages each: the object's pages 0-1, 4-5 (block 0) and 8-9 (block 1's
/// first two); returns the object's bytes.
async fn grow(bed: &Bed, key: &str) -> bytes::Bytes {
    let body = pattern(3, 2 * B);
    bed.origin.put(key, body.clone());
    bed.head(key).await.unwrap();
    let p = page();
    for first in [0, 4 * p, 8 * p] {
        let last = first + 2 * p - 1;
        let r = bed
            .get(key, Some(&format!("bytes={first}-{last}")))
            .await
            .unwrap();
        assert!(r.bytes() == &body.slice(first..=last));
    }
    body
}

#[tokio::test(start_paused = true)]
async fn a_grown_blocks_pages_are_written_once_and_a_read_loads_only_its_pages() {
    let bed = bed(false).await;
    let before = written(&bed).await;
    let body = grow(&bed, "data/p.bin").await;
    assert_eq!(pages_written(&bed), 0, "a growing block stays in DRAM");
    assert!(written(&bed).await - before <= ALIGN);
    bed.cache.write_partials().await;
    // Pages 0-1 and 4-5 of block 0 (8 pages of 8 KiB in a 64 KiB block), 0-1 of block 1.
    assert_eq!(pages_written(&bed), 6);
    let once = written(&bed).await;
    let wrote = once - before;
    assert!(
        wrote >= 6 * page() && wrote <= 6 * (page() + 2 * ALIGN) + 2 * ALIGN,
        "{wrote} bytes for 6 pages"
    );
    // Leaving DRAM, and again: nothing more (its pages are on disk).
    bed.cache.data.memory().evict_all();
    bed.cache.write_partials().await;
    assert_eq!(pages_written(&bed), 6);
    // A read of page 5 alone misses DRAM and reads that page from disk, not the block.
    let disk = read_from_disk(&bed);
    let p = page();
    let r = bed
        .get(
            "data/p.bin",
            Some(&format!("bytes={}-{}", 5 * p, 6 * p - 1)),
        )
        .await
        .unwrap();
    assert_eq!(r.label(), "hit");
    assert!(r.bytes() == &body.slice(5 * p..6 * p));
    let read = read_from_disk(&bed) - disk;
    assert!(
        read >= p && read <= p + 2 * ALIGN,
        "{read} bytes read for one page"
    );
    // Read back, and left again: not rewritten.
    bed.cache.data.memory().evict_all();
    bed.cache.write_partials().await;
    assert_eq!(pages_written(&bed), 6);
    // No page; foyer's own bookkeeping of the waits (an index block each) only.
    let again = written(&bed).await - once;
    assert!(
        again <= 3 * ALIGN,
        "{again} bytes written after the read-back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_range_across_pages_on_disk_and_in_dram_is_served_whole() {
    let bed = bed(false).await;
    let body = grow(&bed, "data/q.bin").await;
    bed.cache.write_partials().await;
    bed.cache.data.memory().evict_all();
    let p = page();
    // Pages 4-5 from disk, then 2-5: 2-3 from the origin, 4-5 from DRAM (read back).
    let r = bed
        .get(
            "data/q.bin",
            Some(&format!("bytes={}-{}", 4 * p + 10, 6 * p - 10)),
        )
        .await
        .unwrap();
    assert_eq!(r.label(), "hit");
    assert!(r.bytes() == &body.slice(4 * p + 10..6 * p - 9));
    let r = bed
        .get(
            "data/q.bin",
            Some(&format!("bytes={}-{}", 2 * p, 6 * p - 1)),
        )
        .await
        .unwrap();
    assert!(r.bytes() == &body.slice(2 * p..6 * p));
}

#[tokio::test(start_paused = true)]
async fn every_insert_writes_complete_pages_at_each_fill_once() {
    let bed = bed(true).await;
    grow(&bed, "data/p.bin").await;
    // Written as the fills stored them, before the block left DRAM; each page once.
    assert_eq!(pages_written(&bed), 6);
    bed.cache.write_partials().await;
    assert_eq!(pages_written(&bed), 6);
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
    let pages = B / page();
    assert_eq!(pages_written(&bed), pages as u64);
    assert!(
        stored - before >= B && stored - before <= B + (2 * pages + 2) * ALIGN,
        "{stored} - {before}"
    );
    bed.cache.write_partials().await;
    bed.cache.data.memory().evict_all();
    assert_eq!(pages_written(&bed), pages as u64);
    assert!(written(&bed).await - stored <= 2 * ALIGN);
}

/// Twelve 1 MiB blocks stored at once are 96 pages, three times foyer's 4 MiB write buffer:
/// foyer drops what arrives while its buffer is full and a write is in flight; the page writer
/// paces them, so every page reaches the disk (a restart or a DRAM miss finds it).
#[tokio::test]
async fn a_burst_of_blocks_larger_than_foyers_write_buffer_reaches_the_disk_whole() {
    use crate::block::Block;
    use crate::store::{self, BlockKey, StoreEvents, StoreSettings};
    const MIB: usize = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(StoreEvents::default());
    let s = StoreSettings {
        dram_bytes: 64 * MIB,
        disk_dir: dir.path().to_path_buf(),
        disk_bytes: 256 * MIB,
        write_every_insert: false,
    };
    let st = store::open("data", &s, MIB, events.clone(), None, 0)
        .await
        .unwrap();
    let key = |index: u64| BlockKey {
        bucket: Arc::from("bed"),
        key: Arc::from("data/burst.bin"),
        etag: Arc::from("e1"),
        block_bytes: MIB as u32,
        index,
    };
    for i in 0..12 {
        let bytes = bytes::Bytes::from(vec![i as u8; MIB]);
        store::insert_final(&st, &events, key(i), Block::Full(bytes));
    }
    events.drain().await;
    st.storage().wait().await;
    let pages = MIB / page_bytes(MIB as u32) as usize;
    assert_eq!(events.pages.written.load(Relaxed), 12 * pages as u64);
    assert_eq!(events.pages.dropped.load(Relaxed), 0);
    assert!(st.statistics().disk_write_bytes() >= 12 * MIB);
    for i in 0..12 {
        for p in 0..pages as u32 {
            assert!(
                st.storage().may_contains(&key(i).page(p)),
                "block {i} page {p}"
            );
        }
    }
}
