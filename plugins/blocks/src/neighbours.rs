//! Whether small reads' neighbours come: the evidence behind `fill: auto`'s choice between a
//! range fill (only the bytes read) and a whole-block fill for a small read's miss. A read is
//! small when it is shorter than a block: a whole block then costs the origin up to the
//! block's size more than the read, paid back in round trips only when neighbours come.
//!
//! A small read's range fill of a block that held nothing is a *first touch*; a later small
//! read that misses on a block holding some bytes is a *neighbour*. When at least half the
//! first-touched blocks saw a neighbour, neighbours are likely and first touches fill whole
//! blocks (one round trip then serves them all, as nginx's slices do); otherwise a first touch
//! costs the origin only the bytes read. One block in [`EXPLORE`] keeps a range fill for its
//! first touch whatever the estimate says, so the estimate follows the workload when it
//! changes; while neighbours are likely, a neighbour's miss fills the rest of its block (the
//! sample's too). Counts halve every [`WINDOW`] first touches: the estimate covers about the
//! last thousand.

use std::sync::atomic::{AtomicU64, Ordering};

/// First touches seen before the estimate is trusted.
pub const WARM_UP: u64 = 16;
/// First touches per halving of the counts.
pub const WINDOW: u64 = 1024;
/// One block in this many keeps range fills (the estimate's sample while whole fills run).
pub const EXPLORE: u64 = 16;

/// The neighbour estimate of one node (relaxed atomics; touched on the miss path only).
#[derive(Default)]
pub struct Neighbours {
    first: AtomicU64,
    again: AtomicU64,
}

impl Neighbours {
    /// A small read range-filled a block that held nothing.
    pub fn first_touch(&self) {
        if self.first.fetch_add(1, Ordering::Relaxed) + 1 >= WINDOW {
            // Racy halving is fine: the estimate is a ratio, not a ledger.
            self.first.store(WINDOW / 2, Ordering::Relaxed);
            let a = self.again.load(Ordering::Relaxed);
            self.again.store(a / 2, Ordering::Relaxed);
        }
    }

    /// A small read missed on a block that held some bytes.
    pub fn neighbour(&self) {
        self.again.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether neighbours are likely: at least one per two first touches, after the warm-up.
    /// A small read's miss on a block holding some bytes (a neighbour, counted already) then
    /// fills the rest of the block, in the sample too: the sample is there to see whether a
    /// first touch meets a neighbour, and once one came, its later ones cost nothing.
    pub fn likely(&self) -> bool {
        let f = self.first.load(Ordering::Relaxed);
        let a = self.again.load(Ordering::Relaxed);
        f >= WARM_UP && a * 2 >= f
    }

    /// Whether a small read's first touch of a block should fill it whole; `sample` is a
    /// stable hash of the block (one in [`EXPLORE`] keeps range fills).
    pub fn whole(&self, sample: u64) -> bool {
        self.likely() && !sample.is_multiple_of(EXPLORE)
    }

    /// (first touches, neighbours) in the current window.
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

    #[test]
    fn neighbours_turn_whole_fills_on_and_their_absence_turns_them_off() {
        let n = Neighbours::default();
        (0..WARM_UP - 1).for_each(|_| {
            n.first_touch();
            n.neighbour();
        });
        assert!(!n.whole(1), "not before the warm-up");
        n.first_touch();
        assert!(n.whole(1));
        assert!(!n.whole(EXPLORE), "the sampled blocks keep range fills");
        // Sparse reads: the sampled first touches see no neighbours.
        (0..WARM_UP).for_each(|_| n.first_touch());
        assert!(!n.whole(1));
    }

    #[test]
    fn counts_halve_per_window() {
        let n = Neighbours::default();
        (0..WINDOW - 1).for_each(|_| n.first_touch());
        (0..100).for_each(|_| n.neighbour());
        n.first_touch();
        assert_eq!(n.counts(), (WINDOW / 2, 50));
    }
}
