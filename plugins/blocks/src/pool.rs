//! Block buffers reused across fills and evictions.
//!
//! Every buffer a fill, a span merge or a disk read stores in a block comes from here, in one
//! of a few size classes, and goes back here when the last `Bytes` of it drops (the block was
//! evicted, replaced or removed and no response still sends it). A fill then writes into pages
//! that are already mapped: no fresh pages for the kernel to zero per fill (`clear_page_erms`
//! was the cold path's largest kernel symbol), and no buffers of every size left in glibc's
//! arenas to fragment them (RSS was 2.3x the DRAM ceilings with glibc's defaults).
//!
//! A pool may also hold a *reserve*: the caches' DRAM ceilings, populated with written
//! block-size buffers at start ([`BufferPool::populate_one`], run by `populate`), so the
//! first fills of a fresh proxy write into mapped pages too. With a reserve, free buffers are
//! kept while free and handed-out bytes together stay within it, so RSS holds at the ceilings.
//!
//! Written here, on crossbeam's lock-free `SegQueue`, because the pool must hand out
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
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

pub use populate::PopulateState;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use crossbeam_queue::SegQueue;

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
    /// Bytes of buffers written and put in the pool to populate its reserve.
    pub populated: AtomicU64,
}

/// Free buffers by size class: at most `bound` bytes of them, or more while free and
/// handed-out bytes together stay within the `reserve`.
#[derive(Debug)]
pub struct BufferPool {
    classes: Vec<SegQueue<Vec<u8>>>,
    free_bytes: AtomicUsize,
    /// Bytes of pooled-class buffers handed out and not given back yet.
    out_bytes: AtomicUsize,
    bound: AtomicUsize,
    reserve: AtomicUsize,
    /// Where populating the reserve stands: one of [`PopulateState`].
    populate: AtomicU8,
    /// Counters.
    pub stats: PoolStats,
}

static SHARED: LazyLock<Arc<BufferPool>> =
    LazyLock::new(|| Arc::new(BufferPool::new(DEFAULT_FREE_BYTES)));

impl BufferPool {
    /// A pool that keeps at most `bound` free bytes.
    pub fn new(bound: usize) -> Self {
        Self {
            classes: (0..CLASSES).map(|_| SegQueue::new()).collect(),
            free_bytes: AtomicUsize::new(0),
            out_bytes: AtomicUsize::new(0),
            bound: AtomicUsize::new(bound),
            reserve: AtomicUsize::new(0),
            populate: AtomicU8::new(PopulateState::Off as u8),
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

    /// Keeps free buffers while free and handed-out bytes stay within `reserve` bytes (the
    /// caches' DRAM ceilings), beyond the bound; 0: the bound alone.
    pub fn set_reserve(&self, reserve: usize) {
        self.reserve.store(reserve, Ordering::Relaxed);
    }

    /// Free bytes held now.
    pub fn free_bytes(&self) -> usize {
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of pooled buffers handed out and not given back.
    pub fn out_bytes(&self) -> usize {
        self.out_bytes.load(Ordering::Relaxed)
    }

    /// Free bytes the pool may keep now: its bound, or what the reserve leaves beside the
    /// handed-out buffers when that is more.
    fn room(&self) -> usize {
        let reserve = self.reserve.load(Ordering::Relaxed);
        let out = self.out_bytes.load(Ordering::Relaxed);
        self.bound
            .load(Ordering::Relaxed)
            .max(reserve.saturating_sub(out))
    }

    /// The counters, for `GET /stats`.
    pub fn doc(&self) -> floe_core::wire::BufferPoolDoc {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        floe_core::wire::BufferPoolDoc {
            free_bytes: self.free_bytes() as u64,
            reused: n(&self.stats.reused),
            fresh: n(&self.stats.fresh),
            freed: n(&self.stats.freed),
            reserve_bytes: self.reserve.load(Ordering::Relaxed) as u64,
            populated_bytes: n(&self.stats.populated),
            populate: self.populate_state().name().to_owned(),
        }
    }

    /// An empty buffer able to hold `len` bytes without growing: a free one of its class when
    /// there is one (its old bytes are not visible: its length is 0).
    pub fn take(self: &Arc<Self>, len: usize) -> Filling {
        let Some((class, cap)) = class_of(len) else {
            return Filling {
                vec: Vec::with_capacity(len),
                pool: None,
                cap: 0,
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
                // With a reserve, what is free makes room for it: free and handed-out bytes
                // stay within the reserve (the free buffers are all of smaller classes).
                self.out_bytes.fetch_add(cap, Ordering::Relaxed);
                self.make_room_below(class, 0, self.room());
                return Filling {
                    vec: Vec::with_capacity(cap),
                    pool: Some(self.clone()),
                    cap,
                };
            }
        };
        self.out_bytes.fetch_add(cap, Ordering::Relaxed);
        Filling {
            vec,
            pool: Some(self.clone()),
            cap,
        }
    }

    /// A free buffer of `class`, or else of the smallest larger class that has one, with its
    /// capacity.
    fn pop_at_least(&self, class: usize) -> Option<(Vec<u8>, usize)> {
        (class..CLASSES).find_map(|c| self.classes[c].pop().map(|v| (v, class_cap(c))))
    }

    /// At `room`, frees buffers of classes below `class`, smallest first, until `cap` more
    /// bytes fit: a larger buffer can serve any smaller fill, a smaller one no larger.
    fn make_room_below(&self, class: usize, cap: usize, room: usize) {
        let mut smaller = 0;
        while smaller < class && self.free_bytes.load(Ordering::Relaxed) + cap > room {
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

    /// Takes back a buffer handed out as `taken` bytes (the last `Bytes` of it dropped): kept
    /// while there is room ([`Self::room`]), else freed.
    fn give_back(&self, vec: Vec<u8>, taken: usize) {
        self.out_bytes.fetch_sub(taken, Ordering::Relaxed);
        let Some((class, cap)) = class_of(vec.capacity()).filter(|(_, c)| *c == vec.capacity())
        else {
            return;
        };
        let room = self.room();
        self.make_room_below(class, cap, room);
        let kept = self.free_bytes.fetch_add(cap, Ordering::Relaxed) + cap <= room;
        if kept {
            self.classes[class].push(vec);
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
    /// The bytes counted as handed out for it.
    cap: usize,
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
            Some(pool) => Bytes::from_owner(Pooled {
                vec,
                pool,
                cap: self.cap,
            }),
            None => Bytes::from(vec),
        }
    }
}

impl Drop for Filling {
    /// An abandoned fill gives its buffer back at once.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(std::mem::take(&mut self.vec), self.cap);
        }
    }
}

/// The owner of a frozen pooled buffer.
struct Pooled {
    vec: Vec<u8>,
    pool: Arc<BufferPool>,
    cap: usize,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.vec
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.vec), self.cap);
    }
}

#[path = "populate.rs"]
pub mod populate;

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
