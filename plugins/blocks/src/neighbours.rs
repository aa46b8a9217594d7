//! Whether small reads' neighbours come: the evidence behind `fill: auto`'s choice between a
//! range fill (only the bytes read) and a whole-block fill for a small read's miss. A read is
//! small when it is shorter than a block: a whole block then costs the origin up to the
//! block's size more than the read, paid back in round trips only when neighbours come.
//!
//! A small read's range fill of a block that held nothing is a *first touch*; a later small
//! read that misses on a block holding some bytes is a *neighbour*. When at least half the
//! judged first touches saw a neighbour, neighbours are likely and first touches fill whole
//! blocks (one round trip then serves them all, as nginx's slices do); otherwise a first touch
//! costs the origin only the bytes read. One block in [`EXPLORE`] keeps a range fill for its
//! first touch whatever the estimate says, so the estimate follows the workload when it
//! changes; while neighbours are likely, a neighbour's miss fills the rest of its block (the
//! sample's too). Counts halve every [`WINDOW`] judged first touches: the estimate covers
//! about the last thousand.
//!
//! A first touch is judged when its neighbour comes (yes) or once [`HORIZON`] has passed
//! without one (no), not when it happens: counted at once, every first touch was a "no" until
//! its neighbour arrived, so a fresh proxy under random reads (a block read again ~2 s later)
//! judged neighbours unlikely through its first seconds and range-filled ~900 of 1,024 blocks
//! first (load/PERFORMANCE.md, "Neighbours judged when known"): ~900 more origin GETs than
//! nginx's slices for the same bytes, each a miss for its neighbour later.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Judged first touches before the estimate is trusted.
pub const WARM_UP: u64 = 16;
/// Judged first touches per halving of the counts.
pub const WINDOW: u64 = 1024;
/// One block in this many keeps range fills (the estimate's sample while whole fills run).
pub const EXPLORE: u64 = 16;
/// How long a first touch waits for its neighbour before it is judged to have none: long
/// against a query's burst of reads of one file (milliseconds), short against how long a
/// block stays cached (minutes), so a whole fill judged worth it is paid back while cached.
pub const HORIZON: Duration = Duration::from_secs(5);
/// First touches awaiting judgement at most; past it the oldest is judged (no neighbour).
const PENDING: usize = 1024;

/// The neighbour estimate of one node (touched on the miss path only: the pending first
/// touches sit behind a mutex that no hit takes).
#[derive(Default)]
pub struct Neighbours {
    first: AtomicU64,
    again: AtomicU64,
    /// First touches not judged yet: (block's stable hash, when).
    pending: Mutex<VecDeque<(u64, Instant)>>,
    /// Whether a pending first touch may be old enough to judge (saves the lock otherwise).
    any_pending: AtomicBool,
}

impl Neighbours {
    /// A small read range-filled the block `block` (its stable hash) that held nothing.
    pub fn first_touch(&self, block: u64, now: Instant) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        if pending.len() >= PENDING {
            pending.pop_front();
            self.judge(false);
        }
        pending.push_back((block, now));
        self.any_pending.store(true, Ordering::Relaxed);
    }

    /// A small read missed on the block `block`, which held some bytes: a yes for its first
    /// touch if that one is still waiting (a block's later misses, or one judged already,
    /// change nothing).
    pub fn neighbour(&self, block: u64) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        if let Some(at) = pending.iter().position(|(b, _)| *b == block) {
            pending.remove(at);
            self.judge(true);
        }
    }

    /// Judges the first touches that waited [`HORIZON`] in vain.
    fn expire(&self, now: Instant) {
        if !self.any_pending.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        while let Some((_, at)) = pending.front() {
            if now.saturating_duration_since(*at) < HORIZON {
                break;
            }
            pending.pop_front();
            self.judge(false);
        }
        self.any_pending
            .store(!pending.is_empty(), Ordering::Relaxed);
    }

    fn judge(&self, saw_neighbour: bool) {
        if saw_neighbour {
            self.again.fetch_add(1, Ordering::Relaxed);
        }
        if self.first.fetch_add(1, Ordering::Relaxed) + 1 >= WINDOW {
            // Racy halving is fine: the estimate is a ratio, not a ledger.
            self.first.store(WINDOW / 2, Ordering::Relaxed);
            let a = self.again.load(Ordering::Relaxed);
            self.again.store(a / 2, Ordering::Relaxed);
        }
    }

    /// Whether neighbours are likely: at least one per two judged first touches, after the
    /// warm-up. A small read's miss on a block holding some bytes (a neighbour, counted
    /// already) then fills the rest of the block, in the sample too: the sample is there to see
    /// whether a first touch meets a neighbour, and once one came, its later ones cost nothing.
    pub fn likely(&self, now: Instant) -> bool {
        self.expire(now);
        let f = self.first.load(Ordering::Relaxed);
        let a = self.again.load(Ordering::Relaxed);
        f >= WARM_UP && a * 2 >= f
    }

    /// Whether a small read's first touch of a block should fill it whole; `sample` is a
    /// stable hash of the block (one in [`EXPLORE`] keeps range fills).
    pub fn whole(&self, sample: u64, now: Instant) -> bool {
        !sample.is_multiple_of(EXPLORE) && self.likely(now)
    }

    /// (judged first touches, those that saw a neighbour) in the current window.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.first.load(Ordering::Relaxed),
            self.again.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` first touches of blocks `from..from + n` at `at`.
    fn touch(n: &Neighbours, from: u64, count: u64, at: Instant) {
        (from..from + count).for_each(|b| n.first_touch(b, at));
    }

    #[test]
    fn neighbours_turn_whole_fills_on_and_their_absence_turns_them_off() {
        let t0 = Instant::now();
        let n = Neighbours::default();
        touch(&n, 0, WARM_UP, t0);
        (0..WARM_UP - 1).for_each(|b| n.neighbour(b));
        assert!(!n.whole(1, t0), "not before the warm-up: 15 judged");
        n.neighbour(WARM_UP - 1);
        assert!(n.whole(1, t0));
        assert!(!n.whole(EXPLORE, t0), "the sampled blocks keep range fills");
        // Sparse reads: the next first touches see no neighbours within the horizon.
        touch(&n, 100, WARM_UP + 1, t0);
        assert!(n.whole(1, t0 + HORIZON / 2), "not judged yet");
        assert!(!n.whole(1, t0 + HORIZON));
        assert_eq!(n.counts(), (2 * WARM_UP + 1, WARM_UP));
    }

    #[test]
    fn a_first_touch_is_no_until_its_neighbour_only_once_the_horizon_passed() {
        // The fresh-proxy case: every block's neighbour comes, ~2 s after its first touch.
        let t0 = Instant::now();
        let n = Neighbours::default();
        for second in 0..4u64 {
            touch(&n, second * 100, 100, t0 + Duration::from_secs(second));
            if second >= 2 {
                ((second - 2) * 100..(second - 1) * 100).for_each(|b| n.neighbour(b));
            }
            assert_eq!(
                n.likely(t0 + Duration::from_secs(second)),
                second >= 2,
                "second {second}"
            );
        }
        assert_eq!(n.counts(), (200, 200), "the pending 200 not counted as no");
    }

    #[test]
    fn a_block_is_judged_once_and_the_oldest_goes_when_too_many_wait() {
        let t0 = Instant::now();
        let n = Neighbours::default();
        n.first_touch(7, t0);
        n.neighbour(7);
        n.neighbour(7);
        n.neighbour(8);
        assert_eq!(n.counts(), (1, 1));
        touch(&n, 1000, PENDING as u64 + 1, t0);
        assert_eq!(n.counts(), (2, 1), "the oldest judged no to make room");
        n.neighbour(1000);
        assert_eq!(n.counts(), (2, 1), "judged already");
        n.neighbour(1001);
        assert_eq!(n.counts(), (3, 2));
    }

    #[test]
    fn counts_halve_per_window() {
        let t0 = Instant::now();
        let n = Neighbours::default();
        touch(&n, 0, 100, t0);
        (0..100).for_each(|b| n.neighbour(b));
        touch(&n, 100, WINDOW - 100, t0);
        assert!(!n.likely(t0 + HORIZON));
        assert_eq!(n.counts(), (WINDOW / 2, 50));
    }
}
