//! What a read will cost before it starts: which in-block bytes each block needs, what a fill
//! of a block fetches given what it holds (range fills, whole blocks, read-ahead for sequential
//! reads), and the plan that labels a response hit, miss or partial.

use crate::block::{Block, MAX_SPANS};
use crate::cache::Fill;
use crate::classify::Store;
use crate::range::block_span;
use crate::reader::{BlockReader, Plan, PLAN};

impl BlockReader {
    /// The block's length and the in-block bytes `lo..hi` this response needs of it (empty for
    /// a block past the response that a column-chunk fill fetches).
    pub(crate) fn need(&self, index: u64) -> (u32, u32, u32) {
        let (start, len) = block_span(index, self.bs(), self.target.map.size);
        let end = start + len;
        let lo = self.first.clamp(start, end) - start;
        let hi = (self.last + 1).clamp(start, end) - start;
        (len as u32, lo as u32, hi.max(lo) as u32)
    }

    /// Where a fill of block `index` ends in the block (at least the response's `hi`): on to
    /// `fill_end` when the read starts a known column chunk.
    fn fill_hi(&self, index: u64) -> u32 {
        let (start, len) = block_span(index, self.bs(), self.target.map.size);
        (self.fill_end.clamp(start, start + len) - start) as u32
    }

    /// Whether `fill: auto`'s small-read policy judges this read (a data read shorter than a
    /// block that no column chunk extends). Judging only reads under 256 KiB left random
    /// 1 MiB reads of 2 MiB blocks at one origin GET per read where nginx's slices cost one
    /// per block (load/PERFORMANCE.md: 16-client cold 0.49x nginx's throughput, now 0.86x;
    /// with 4 clients the origin now sends 1.39x the bytes served instead of 0.82x).
    fn small(&self, index: u64) -> bool {
        self.cache.settings.fill == Fill::Auto
            && !self.whole
            && self.last - self.first + 1 < self.bs()
            && self.fill_end == self.last + 1
            && self.store(index) == Store::Data
    }

    /// Whether a small read's miss of block `index` should fill the block whole.
    fn neighbours_come(&self, index: u64) -> bool {
        self.small(index)
            && self
                .cache
                .neighbours
                .whole(self.key(index).stable_hash(), now())
    }

    /// The in-block bytes a fill of `index` fetches, given what the block holds.
    pub(crate) fn fetch(&self, index: u64, held: Option<&Block>) -> Option<(u32, u32)> {
        let (len, lo, hi) = self.need(index);
        let whole = self.whole
            || self.cache.settings.fill == Fill::Block
            || self.store(index) == Store::Metadata
            || held.is_some_and(|b| b.spans() >= MAX_SPANS);
        let Some(b) = held else {
            // A small read whose neighbours come fills its whole block: fetching only from the
            // read on cost DuckDB's TPC-H Q1 152 origin GETs instead of 116 (load/bench.sh).
            return Some(match whole || self.neighbours_come(index) {
                true => (0, len),
                false => (lo, self.fill_hi(index).max(hi)),
            });
        };
        if self.whole {
            return b.missing(0, len);
        }
        // Everything a client read needs is here (a block at MAX_SPANS too): nothing to fetch.
        let (a, z) = b.missing(lo, hi)?;
        if whole || (self.small(index) && self.cache.neighbours.likely(now())) {
            return b.missing(0, len);
        }
        // A read that starts where a cached span ends is sequential: read the block ahead.
        if a == lo && b.span_ends_at(lo) {
            return b.missing(a, len).or(Some((a, z)));
        }
        Some(b.missing(a, self.fill_hi(index).max(z)).unwrap_or((a, z)))
    }

    /// Looks the read up in the column-chunk hints, once (on its first miss).
    pub(crate) fn hint(&mut self) {
        if std::mem::replace(&mut self.hinted, true)
            || self.whole
            || !matches!(self.target.map.class.store, Store::Data | Store::KeptPart)
        {
            return;
        }
        let t = &self.target;
        self.fill_end = self.cache.hints.fill_end(
            &t.bucket_key,
            &t.object_key,
            Some(t.map.size),
            (self.first, self.last),
        );
    }

    /// Feeds the neighbour estimate with a small read's fill of `index`: a first touch when
    /// the block held nothing and the fill is the read's range, a neighbour when it held some
    /// bytes.
    pub(crate) fn note_touch(&self, index: u64, held: Option<&Block>) {
        if !self.small(index) {
            return;
        }
        // The block's hash and the clock once: `small` holds here, so `whole` is what
        // `neighbours_come` would say.
        let (estimate, block, at) = (&self.cache.neighbours, self.key(index).stable_hash(), now());
        match held {
            Some(_) => estimate.neighbour(block),
            None if !estimate.whole(block, at) => estimate.first_touch(block, at),
            None => {}
        }
    }

    pub(crate) fn block_range(&self) -> (u64, u64) {
        (self.first / self.bs(), self.last / self.bs())
    }

    /// Looks up the first blocks of the response and says what it will cost; the rest are
    /// judged by presence alone (a partial entry there counts as cached).
    pub async fn plan(&mut self) -> Plan {
        let mut plan = Plan::default();
        let (b0, b1) = self.block_range();
        for i in b0..=b1 {
            // Blocks the resolving GET is filling for this response.
            let own = self
                .pending
                .iter()
                .find(|p| p.index == i)
                .and_then(|p| p.own);
            if let Some((from, to)) = own {
                plan.missing_bytes += u64::from(to - from);
                plan.first_missing.get_or_insert(i);
                continue;
            }
            let key = self.key(i);
            let store = self.store(i);
            let slot = (i - b0) as usize;
            let held = if slot < PLAN {
                let b = self.cache.lookup(&key, store, self.need(i)).await;
                self.planned[slot] = b.clone();
                b
            } else if self.cache.contains(&key, store) {
                plan.cached += 1;
                continue;
            } else {
                None
            };
            let mut fetch = self.fetch(i, held.as_ref());
            if fetch.is_some() && !self.hinted {
                self.hint();
                fetch = self.fetch(i, held.as_ref());
            }
            if fetch.is_some() {
                plan.first_missing.get_or_insert(i);
            }
            match fetch {
                None => plan.cached += 1,
                // As start_fill does: a fill running on into the next (uncached) block fetches
                // this one to its end.
                Some((a, _))
                    if i < b1 && !self.cache.contains(&self.key(i + 1), self.store(i + 1)) =>
                {
                    plan.missing_bytes += u64::from(self.need(i).0 - a)
                }
                Some((a, z)) => plan.missing_bytes += u64::from(z - a),
            }
        }
        plan
    }
}

/// The neighbour estimate's clock: tokio's, so the paused clock of the test beds drives it.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
