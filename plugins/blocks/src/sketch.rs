//! A count-min frequency sketch for admission: four rows of 4-bit-saturating counters in
//! atomics (no lock on the hit path), halved periodically so old popularity fades (TinyLFU's
//! reset). Written here because the admission decision sits in front of two foyer caches and
//! needs "touched before?" rather than foyer's own eviction-side policy.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

const ROWS: usize = 4;

/// Frequency estimates of hashed keys.
pub struct Sketch {
    rows: Vec<Vec<AtomicU8>>,
    mask: u64,
    additions: AtomicU64,
    reset_at: u64,
}

impl Sketch {
    /// A sketch with at least `width` counters per row (rounded up to a power of two).
    pub fn new(width: usize) -> Self {
        let w = width.next_power_of_two().max(64);
        let rows = (0..ROWS)
            .map(|_| (0..w).map(|_| AtomicU8::new(0)).collect())
            .collect();
        Self {
            rows,
            mask: (w - 1) as u64,
            additions: AtomicU64::new(0),
            reset_at: (w as u64) * 10,
        }
    }

    fn slot(&self, hash: u64, row: usize) -> usize {
        let h =
            hash.rotate_left((row as u32) * 16) ^ (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h.wrapping_mul(0xff51_afd7_ed55_8ccd) >> 20 & self.mask) as usize
    }

    /// Records one touch and returns the estimate after it.
    pub fn touch(&self, hash: u64) -> u8 {
        let mut est = u8::MAX;
        for (r, row) in self.rows.iter().enumerate() {
            let c = &row[self.slot(hash, r)];
            let v = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(if v < 15 { v + 1 } else { v })
            });
            est = est.min(v.map_or(15, |old| (old + 1).min(15)));
        }
        if self.additions.fetch_add(1, Ordering::Relaxed) + 1 >= self.reset_at {
            self.halve();
        }
        est
    }

    /// The current estimate.
    pub fn estimate(&self, hash: u64) -> u8 {
        self.rows
            .iter()
            .enumerate()
            .map(|(r, row)| row[self.slot(hash, r)].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    fn halve(&self) {
        self.additions.store(0, Ordering::Relaxed);
        for row in &self.rows {
            for c in row {
                let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v / 2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_touches() {
        let s = Sketch::new(1024);
        assert_eq!(s.estimate(42), 0);
        assert_eq!(s.touch(42), 1);
        assert_eq!(s.touch(42), 2);
        assert_eq!(s.estimate(7), 0);
        for _ in 0..40 {
            s.touch(9);
        }
        assert_eq!(s.estimate(9), 15);
    }
}
