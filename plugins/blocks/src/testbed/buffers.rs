//! Block buffers go back to the pool when the store lets go of their block: evicted, removed
//! or replaced, and only once no response still holds them.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use crate::block::{Block, Span};
use crate::pool::BufferPool;
use crate::store::{self, BlockKey, BlockStore, StoreEvents, StoreSettings};

const MIB: usize = 1 << 20;

fn key(index: u64) -> BlockKey {
    BlockKey {
        bucket: Arc::from("bed"),
        key: Arc::from("data/a.bin"),
        etag: Arc::from("e1"),
        block_bytes: MIB as u32,
        index,
    }
}

fn block(pool: &Arc<BufferPool>, len: usize, byte: u8) -> Bytes {
    let mut f = pool.take(len);
    f.extend_from_slice(&vec![byte; len]);
    f.freeze()
}

/// A data store of 4 MiB DRAM (three 1 MiB blocks and their keys fit) over a disk tier.
async fn store(dir: &std::path::Path) -> (BlockStore, Arc<StoreEvents>) {
    let events = Arc::new(StoreEvents::default());
    let s = StoreSettings {
        dram_bytes: 4 * MIB,
        disk_dir: dir.to_path_buf(),
        disk_bytes: 64 * MIB,
        write_every_insert: false,
    };
    let st = store::open("data", &s, MIB, events.clone(), None, 0)
        .await
        .unwrap();
    (st, events)
}

#[tokio::test]
async fn an_evicted_blocks_buffer_returns_to_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (st, events) = store(dir.path()).await;
    let pool = Arc::new(BufferPool::new(64 * MIB));
    for i in 0..8 {
        store::insert_final(
            &st,
            &events,
            key(i),
            Block::Full(block(&pool, MIB, i as u8)),
        );
    }
    events.drain().await; // the pages queued hold the buffers until written
    st.storage().wait().await;
    let evicted = events.evictions.load(Relaxed);
    assert!(evicted >= 5, "{evicted} evictions");
    assert_eq!(pool.stats.kept.load(Relaxed), evicted);
    assert_eq!(pool.free_bytes(), evicted as usize * MIB);
    // The next fills take the evicted blocks' buffers, not fresh ones.
    let fresh = pool.stats.fresh.load(Relaxed);
    let again: Vec<Bytes> = (0..evicted).map(|i| block(&pool, MIB, i as u8)).collect();
    assert_eq!(pool.stats.fresh.load(Relaxed), fresh);
    assert_eq!(pool.free_bytes(), 0);
    drop(again);
}

#[tokio::test]
async fn a_buffer_a_response_still_sends_returns_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (st, events) = store(dir.path()).await;
    let pool = Arc::new(BufferPool::new(64 * MIB));
    let bytes = block(&pool, MIB, 1);
    let sending = bytes.slice(100..200);
    let piece = Span { off: 0, bytes };
    store::insert_growing(
        &st,
        &events,
        key(0),
        Block::of(2 * MIB as u32, piece),
        false,
    );
    st.remove(&key(0));
    events.drain().await; // the pages queued hold the buffers until written
    st.storage().wait().await;
    assert_eq!(pool.free_bytes(), 0, "a response still holds a slice of it");
    assert_eq!(&sending[..], &[1; 100]);
    drop(sending);
    assert_eq!(pool.free_bytes(), MIB);
}

#[tokio::test]
async fn a_replaced_blocks_buffer_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (st, events) = store(dir.path()).await;
    let pool = Arc::new(BufferPool::new(64 * MIB));
    let first = Span {
        off: 0,
        bytes: block(&pool, 256 << 10, 1),
    };
    store::insert_growing(&st, &events, key(0), Block::of(MIB as u32, first), false);
    let second = Span {
        off: 0,
        bytes: block(&pool, 512 << 10, 2),
    };
    store::insert_growing(&st, &events, key(0), Block::of(MIB as u32, second), false);
    events.drain().await; // the pages queued hold the buffers until written
    st.storage().wait().await;
    assert_eq!(pool.free_bytes(), 256 << 10);
    let got = st.get(&key(0)).await.unwrap().unwrap();
    assert_eq!(got.value().held(), 512 << 10);
}

/// A store's ceiling holds its disk tier's buffers and what is charged to it (the pool's free
/// buffers) beside its DRAM entries; a ceiling under the buffers' fixed minimums keeps half for
/// entries.
#[tokio::test]
async fn a_stores_entries_and_its_buffers_fit_its_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let settings = |dram_bytes: usize, name: &str| StoreSettings {
        dram_bytes,
        disk_dir: dir.path().join(name),
        disk_bytes: 64 * MIB,
        write_every_insert: false,
    };
    let big = settings(256 * MIB, "big");
    let reserved = 8 * MIB;
    let events = Arc::new(StoreEvents::default());
    let st = store::open("data", &big, 2 * MIB, events, None, reserved)
        .await
        .unwrap();
    let side = store::side_bytes(&big, 2 * MIB);
    assert!(
        side >= 7 * 4 * MIB,
        "three write buffers and the page queue: {side}"
    );
    let room = st.memory().capacity();
    assert!(
        room + side + reserved <= 256 * MIB,
        "{room} + {side} + {reserved}"
    );
    assert!(
        room + side + reserved > 256 * MIB - MIB,
        "{room}: the rest is for entries"
    );
    let small = settings(16 * MIB, "small");
    let events = Arc::new(StoreEvents::default());
    let st = store::open("data", &small, 2 * MIB, events, None, reserved)
        .await
        .unwrap();
    assert_eq!(st.memory().capacity(), 8 * MIB);
}
