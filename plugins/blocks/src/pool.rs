//! Block buffers reused across fills and evictions.
//!
//! Every buffer a fill, a span merge or a disk read stores in a block comes from here, in one
//! of a few size classes, and goes back here when the last `Bytes` of it drops (the block was
//! evicted, replaced or removed and no response still sends it). A fill then writes into pages
//! that are already mapped: no fresh pages for the kernel to zero per fill (`clear_page_erms`
//! was the cold path's largest kernel symbol), and no buffers of every size left in glibc's
//! arenas to fragment them (RSS was 2.3x the DRAM ceilings with glibc's defaults).
//!
//! Written here, on crossbeam's lock-free `ArrayQueue`, because the pool must hand out
//! `Bytes` that return their buffer when the last clone drops (`Bytes::from_owner`), by size
//! class, with a byte bound on what it keeps: the object-pool crates keep one size, or hand
//! out guards, not `Bytes`.
//!
//! Range fills and span merges ask for every size, so a fill whose class has no free buffer
//! takes one of the smallest larger class that has, cut to its class (the allocator shrinks it
//! in place), and a pool at its bound frees smaller buffers to keep a larger one. With exact
//! classes only, most fills into a full DRAM missed (each miss fresh pages to zero) while the
//! pool, full of sizes nobody asked for, freed what evictions gave back.
//!
//! Classes: 16 KiB steps up to 128 KiB, then eight steps per doubling (a buffer is at most
//! 12.5% larger than what it holds). The store weighs a block by its buffers' capacity
//! ([`footprint`]), so the DRAM ceilings hold in RSS too. Buffers under [`MIN_POOLED`] bytes
//! (mapping records, small spans) are exact allocations, not pooled.

use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use crossbeam_queue::ArrayQueue;

/// Smallest pooled buffer (and the class step below 128 KiB).
pub const MIN_POOLED: usize = 16 << 10;
/// Largest pooled buffer: the largest block `cache.block_bytes` allows.
pub const MAX_POOLED: usize = 8 << 20;
/// Classes below 128 KiB (16 KiB steps).
const SMALL_CLASSES: usize = 8;
/// Classes per doubling above 128 KiB.
const STEPS: usize = 8;
/// Number of classes up to [`MAX_POOLED`] (128 KiB..8 MiB is six doublings).
const CLASSES: usize = SMALL_CLASSES + 6 * STEPS;
/// Free bytes the process-wide pool keeps by default, until [`BufferPool::set_bound`]:
/// enough for the evictions between two fills, small beside the DRAM ceilings.
pub const DEFAULT_FREE_BYTES: usize = 32 << 20;

/// Free bytes a cache with `dram_bytes` of DRAM ceilings keeps pooled: a thirty-second of
/// them, one largest block at least and [`DEFAULT_FREE_BYTES`] at most (RSS may exceed the
/// ceilings by this much).
pub fn bound_for(dram_bytes: usize) -> usize {
    (dram_bytes / 32).clamp(MAX_POOLED, DEFAULT_FREE_BYTES)
}

/// The class index and capacity for a buffer of `len` bytes (`None`: not pooled).
pub fn class_of(len: usize) -> Option<(usize, usize)> {
    if !(MIN_POOLED..=MAX_POOLED).contains(&len) {
        return None;
    }
    if len <= SMALL_CLASSES * MIN_POOLED {
        let cap = len.div_ceil(MIN_POOLED) * MIN_POOLED;
        return Some((cap / MIN_POOLED - 1, cap));
    }
    let octave = ((len - 1) >> 17).ilog2() as usize;
    let step = MIN_POOLED << octave;
    let cap = len.div_ceil(step) * step;
    Some((SMALL_CLASSES + octave * STEPS + cap / step - STEPS - 1, cap))
}

/// The bytes a buffer of `len` bytes takes: its class's capacity, or `len` when not pooled.
pub fn footprint(len: usize) -> usize {
    class_of(len).map_or(len, |(_, cap)| cap)
}

/// What the pool has done (for `/stats` and the tests).
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Buffers handed out again.
    pub reused: AtomicU64,
    /// Buffers allocated because their class had none free.
    pub fresh: AtomicU64,
    /// Buffers given back and kept.
    pub kept: AtomicU64,
    /// Buffers given back and freed (the pool held its bound).
    pub freed: AtomicU64,
}

/// Free buffers by size class, at most `bound` bytes of them.
#[derive(Debug)]
pub struct BufferPool {
    classes: Vec<ArrayQueue<Vec<u8>>>,
    free_bytes: AtomicUsize,
    bound: AtomicUsize,
    /// Counters.
    pub stats: PoolStats,
}

static SHARED: LazyLock<Arc<BufferPool>> =
    LazyLock::new(|| Arc::new(BufferPool::new(DEFAULT_FREE_BYTES)));

impl BufferPool {
    /// A pool that keeps at most `bound` free bytes.
    pub fn new(bound: usize) -> Self {
        let classes = (0..CLASSES)
            .map(|i| ArrayQueue::new((bound.max(MAX_POOLED) / class_cap(i)).max(1)))
            .collect();
        Self {
            classes,
            free_bytes: AtomicUsize::new(0),
            bound: AtomicUsize::new(bound),
            stats: PoolStats::default(),
        }
    }

    /// The process-wide pool every block buffer comes from (foyer decodes disk entries with
    /// no context, so the pool cannot be per cache).
    pub fn shared() -> &'static Arc<BufferPool> {
        &SHARED
    }

    /// Keeps at most `bound` free bytes from now on (the cache sets it from its ceilings).
    pub fn set_bound(&self, bound: usize) {
        self.bound.store(bound, Ordering::Relaxed);
    }

    /// Free bytes held now.
    pub fn free_bytes(&self) -> usize {
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// The counters, for `GET /stats`.
    pub fn doc(&self) -> floe_core::wire::BufferPoolDoc {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        floe_core::wire::BufferPoolDoc {
            free_bytes: self.free_bytes() as u64,
            reused: n(&self.stats.reused),
            fresh: n(&self.stats.fresh),
            freed: n(&self.stats.freed),
        }
    }

    /// An empty buffer able to hold `len` bytes without growing: a free one of its class when
    /// there is one (its old bytes are not visible: its length is 0).
    pub fn take(self: &Arc<Self>, len: usize) -> Filling {
        let Some((class, cap)) = class_of(len) else {
            return Filling {
                vec: Vec::with_capacity(len),
                pool: None,
            };
        };
        let vec = match self.pop_at_least(class) {
            Some((mut v, held)) => {
                self.free_bytes.fetch_sub(held, Ordering::Relaxed);
                self.stats.reused.fetch_add(1, Ordering::Relaxed);
                v.clear();
                // A larger class's buffer is cut to this class: the allocator shrinks it in
                // place (its pages stay mapped) and keeps the tail for its next allocation.
                v.shrink_to(cap);
                v
            }
            None => {
                self.stats.fresh.fetch_add(1, Ordering::Relaxed);
                Vec::with_capacity(cap)
            }
        };
        Filling {
            vec,
            pool: Some(self.clone()),
        }
    }

    /// A free buffer of `class`, or else of the smallest larger class that has one, with its
    /// capacity.
    fn pop_at_least(&self, class: usize) -> Option<(Vec<u8>, usize)> {
        (class..CLASSES).find_map(|c| self.classes[c].pop().map(|v| (v, class_cap(c))))
    }

    /// At the bound, frees buffers of classes below `class`, smallest first, until `cap`
    /// more bytes fit: a larger buffer can serve any smaller fill, a smaller one no larger.
    fn make_room_below(&self, class: usize, cap: usize) {
        let bound = self.bound.load(Ordering::Relaxed);
        let mut smaller = 0;
        while smaller < class && self.free_bytes.load(Ordering::Relaxed) + cap > bound {
            match self.classes[smaller].pop() {
                Some(freed) => {
                    self.free_bytes
                        .fetch_sub(class_cap(smaller), Ordering::Relaxed);
                    self.stats.freed.fetch_add(1, Ordering::Relaxed);
                    drop(freed);
                }
                None => smaller += 1,
            }
        }
    }

    /// Takes a buffer back (the last `Bytes` of it dropped): kept under the bound, else freed.
    fn give_back(&self, vec: Vec<u8>) {
        let Some((class, cap)) = class_of(vec.capacity()).filter(|(_, c)| *c == vec.capacity())
        else {
            return;
        };
        self.make_room_below(class, cap);
        let kept = self.free_bytes.fetch_add(cap, Ordering::Relaxed) + cap
            <= self.bound.load(Ordering::Relaxed)
            && self.classes[class].push(vec).is_ok();
        if kept {
            self.stats.kept.fetch_add(1, Ordering::Relaxed);
        } else {
            self.free_bytes.fetch_sub(cap, Ordering::Relaxed);
            self.stats.freed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn class_cap(class: usize) -> usize {
    if class < SMALL_CLASSES {
        return (class + 1) * MIN_POOLED;
    }
    let octave = (class - SMALL_CLASSES) / STEPS;
    let step = MIN_POOLED << octave;
    (STEPS + 1 + (class - SMALL_CLASSES) % STEPS) * step
}

/// A buffer being written; [`Filling::freeze`] makes it the `Bytes` a block stores.
#[derive(Debug)]
pub struct Filling {
    vec: Vec<u8>,
    pool: Option<Arc<BufferPool>>,
}

impl Filling {
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.vec.len()
    }

    /// Whether nothing is written yet.
    pub fn is_empty(&self) -> bool {
        self.vec.is_empty()
    }

    /// Appends bytes.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.vec.extend_from_slice(bytes);
    }

    /// Appends exactly `len` bytes read from `r`.
    pub fn read_exact_from(&mut self, r: &mut impl Read, len: usize) -> std::io::Result<()> {
        let got = r.take(len as u64).read_to_end(&mut self.vec)?;
        if got != len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    /// The bytes written, as `Bytes` that give the buffer back when the last clone drops.
    pub fn freeze(mut self) -> Bytes {
        let vec = std::mem::take(&mut self.vec);
        match self.pool.take() {
            Some(pool) => Bytes::from_owner(Pooled { vec, pool }),
            None => Bytes::from(vec),
        }
    }
}

impl Drop for Filling {
    /// An abandoned fill gives its buffer back at once.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(std::mem::take(&mut self.vec));
        }
    }
}

/// The owner of a frozen pooled buffer.
struct Pooled {
    vec: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.vec
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.vec));
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
