//! The disk tier's writer of pages: one worker per store hands pages to foyer in batches that
//! fit its write buffer, and waits for each batch to reach the device before the next.
//!
//! Why: foyer's block engine drops an entry that arrives while its write buffer is full and a
//! write is in flight (its `storage_queue_buffer_overflow`), silently. Pages are written once
//! (see [`crate::pages`]): a dropped page is never offered again, so a burst of evictions or of
//! whole blocks stored at once (a 2 MiB block is eight pages) lost pages that a restart or a
//! DRAM miss then fetched from the origin again. Paced here, a page reaches the disk unless
//! this queue is full ([`PageQueue`]'s byte bound), and that is counted (`disk_pages_dropped`).
//!
//! The worker stops when the queue is closed ([`PageQueue`] dropped as the cache closes),
//! after writing what was queued. Its state is the counters `/stats` shows: pages queued,
//! written, dropped.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::block::Block;
use crate::store::{BlockKey, BlockStore};

/// Entry overhead in foyer's buffer for budgeting a batch: its header and key, and the
/// padding of each entry to 4 KiB.
const ENTRY_OVERHEAD: usize = 8 << 10;

/// What the queue carries.
enum Job {
    /// A page to write.
    Page(BlockKey, Bytes),
    /// Answered once everything queued before it is on the device.
    Drain(oneshot::Sender<()>),
}

/// Counters and the set of pages queued but not yet written (so a page is queued once).
#[derive(Default)]
pub struct PageCounters {
    /// Pages handed to the disk tier (queued; written unless the disk tier fails).
    pub written: AtomicU64,
    /// Pages not written because the queue was full.
    pub dropped: AtomicU64,
    /// Bytes queued now.
    pub queued_bytes: AtomicUsize,
    pending: Mutex<HashSet<BlockKey>>,
}

/// The sending side of a store's page writer.
pub struct PageQueue {
    tx: mpsc::UnboundedSender<Job>,
    counters: Arc<PageCounters>,
    bound_bytes: usize,
}

impl PageQueue {
    /// Starts the writer of `store` on the current runtime: batches of at most `batch_bytes`
    /// (foyer's write buffer), at most `bound_bytes` queued.
    pub fn start(
        store: BlockStore,
        counters: Arc<PageCounters>,
        batch_bytes: usize,
        bound_bytes: usize,
    ) -> PageQueue {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, rx, counters.clone(), batch_bytes));
        PageQueue {
            tx,
            counters,
            bound_bytes,
        }
    }

    /// Queues page `page_key` unless the disk tier has it or it is queued already; a page
    /// past the queue's bound is counted as dropped.
    pub fn offer(&self, store: &BlockStore, page_key: BlockKey, bytes: Bytes) {
        let counters = &self.counters;
        if store.storage().may_contains(&page_key) {
            return;
        }
        // One lock: checks and claims the page, so two evictions never queue it twice.
        let claimed = counters
            .pending
            .lock()
            .is_ok_and(|mut pending| pending.insert(page_key.clone()));
        if !claimed {
            return;
        }
        let len = bytes.len();
        let queued = counters.queued_bytes.fetch_add(len, Ordering::AcqRel);
        if queued + len > self.bound_bytes
            || self.tx.send(Job::Page(page_key.clone(), bytes)).is_err()
        {
            counters.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut pending) = counters.pending.lock() {
                pending.remove(&page_key);
            }
            return;
        }
        counters.written.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until every page queued so far is on the device.
    pub fn drain(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (done, wait) = oneshot::channel();
        let sent = self.tx.send(Job::Drain(done)).is_ok();
        async move {
            if sent {
                let _ = wait.await;
            }
        }
    }
}

/// The worker: takes what is queued up to `batch_bytes`, hands it to foyer, waits until it is
/// on the device, then the next batch. Ends when every sender is gone and the queue is empty.
async fn run(
    store: BlockStore,
    mut rx: mpsc::UnboundedReceiver<Job>,
    counters: Arc<PageCounters>,
    batch_bytes: usize,
) {
    let mut pages: Vec<(BlockKey, usize)> = Vec::new();
    let mut drains: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut budget = batch_bytes;
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Page(key, bytes) => {
                    budget = budget.saturating_sub(bytes.len() + ENTRY_OVERHEAD);
                    pages.push((key.clone(), bytes.len()));
                    // Disk only: a phantom entry that foyer's pipe writes as it is dropped.
                    drop(store.storage_writer(key).force().insert(Block::Full(bytes)));
                }
                Job::Drain(done) => drains.push(done),
            }
            if budget > ENTRY_OVERHEAD {
                next = rx.try_recv().ok();
            }
        }
        if !pages.is_empty() {
            store.storage().wait().await;
        }
        let bytes: usize = pages.iter().map(|(_, len)| len).sum();
        counters.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        if let Ok(mut pending) = counters.pending.lock() {
            for (key, _) in pages.drain(..) {
                pending.remove(&key);
            }
        }
        for done in drains.drain(..) {
            let _ = done.send(());
        }
    }
}
