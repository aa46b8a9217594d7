//! The "floe-pool-populate" worker: at start, writes block-size buffers up to the caches'
//! DRAM ceilings (the pool's reserve, `cache.populate_dram`) and keeps them free in the
//! pool, so a fresh proxy's fills write into pages the kernel has already mapped.
//!
//! Without it a fresh proxy's every fill takes fresh pages, which the kernel zeroes one
//! fault at a time on the request path: the largest kernel cost of cold small reads (they
//! fetch whole blocks). Populating pays that once, off the request path, on a blocking
//! thread while the proxy already serves (fills take fresh buffers until it is done), and
//! `/stats` shows it (`buffers.populated_bytes` reaching `buffers.reserve_bytes`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::{class_of, BufferPool};
use crate::cache::CacheSettings;
use crate::store::entry_room;

/// Populates the shared pool with buffers of `block_bytes`.
pub(crate) struct Populate {
    pub(crate) block_bytes: usize,
}

#[async_trait]
impl BackgroundService for Populate {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let stop = Arc::new(AtomicBool::new(false));
        let pool = BufferPool::shared().clone();
        let (len, stop_flag) = (self.block_bytes, stop.clone());
        let began = Instant::now();
        let mut job = tokio::task::spawn_blocking(move || populate(&pool, len, &stop_flag));
        tokio::select! {
            done = &mut job => {
                if let Ok(bytes) = done {
                    tracing::info!(bytes, took_ms = began.elapsed().as_millis() as u64,
                        "block buffer pool populated up to the DRAM ceilings");
                }
            }
            _ = shutdown.changed() => stop.store(true, Ordering::Relaxed),
        }
    }
}

/// The bytes the pool's buffers may take, free and handed out, when populated: the data
/// store's and the shares' room for entries (their ceilings less their disk tiers' buffers,
/// `store::entry_room`) with the pool's own free bound (charged to the data store), and the
/// pinned tables' DRAM. Not the metadata store's ceiling: its entries are mostly smaller than
/// a pooled buffer (exact allocations the pool never sees); the blocks it does take from the
/// pool count as handed out like any other.
pub(crate) fn reserve_for(settings: &CacheSettings, pool_bound: usize) -> usize {
    let bs = settings.block_bytes as usize;
    entry_room(&settings.data, bs, pool_bound)
        + pool_bound
        + settings
            .shares
            .iter()
            .map(|s| entry_room(&s.store, bs, 0))
            .sum::<usize>()
        + settings.kept_bytes
}

/// Writes buffers of `len` bytes into `pool` until its reserve is full or `stop` is set,
/// noting its state in the pool; returns the bytes written.
pub fn populate(pool: &BufferPool, len: usize, stop: &AtomicBool) -> usize {
    pool.set_populate_state(PopulateState::Running);
    let mut bytes = 0;
    loop {
        if stop.load(Ordering::Relaxed) {
            pool.set_populate_state(PopulateState::Stopped);
            return bytes;
        }
        match pool.populate_one(len) {
            Some(cap) => bytes += cap,
            None => break,
        }
    }
    pool.set_populate_state(PopulateState::Done);
    bytes
}

/// Where populating a pool's reserve stands (`/stats`'s `buffers.populate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopulateState {
    /// Not asked for (`cache.populate_dram: false`), or not begun.
    Off = 0,
    /// Writing buffers.
    Running = 1,
    /// The reserve is full.
    Done = 2,
    /// Shut down before it was full.
    Stopped = 3,
}

impl PopulateState {
    /// Its name in `/stats`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Running => "running",
            Self::Done => "done",
            Self::Stopped => "stopped",
        }
    }
}

impl BufferPool {
    /// Notes where populating the reserve stands (the worker's visible state).
    pub fn set_populate_state(&self, state: PopulateState) {
        self.populate.store(state as u8, Ordering::Relaxed);
    }

    /// Where populating the reserve stands.
    pub fn populate_state(&self) -> PopulateState {
        match self.populate.load(Ordering::Relaxed) {
            1 => PopulateState::Running,
            2 => PopulateState::Done,
            3 => PopulateState::Stopped,
            _ => PopulateState::Off,
        }
    }

    /// Writes one buffer able to hold `len` bytes (every page touched, so the kernel maps it
    /// now) and keeps it free, if the reserve has room for it beside the free and handed-out
    /// buffers. Returns its bytes, or `None` when the reserve is full (populating is done).
    pub fn populate_one(&self, len: usize) -> Option<usize> {
        let (class, cap) = class_of(len)?;
        let reserve = self.reserve.load(Ordering::Relaxed);
        if self.free_bytes() + self.out_bytes() + cap > reserve {
            return None;
        }
        // Page by page (a memcpy each, fast in a debug build too): every page is written.
        const PAGE: [u8; 4096] = [1; 4096];
        let mut vec = Vec::with_capacity(cap);
        while vec.len() < cap {
            vec.extend_from_slice(&PAGE[..(cap - vec.len()).min(PAGE.len())]);
        }
        vec.clear();
        self.free_bytes.fetch_add(cap, Ordering::Relaxed);
        self.classes[class].push(vec);
        self.stats
            .populated
            .fetch_add(cap as u64, Ordering::Relaxed);
        Some(cap)
    }
}
