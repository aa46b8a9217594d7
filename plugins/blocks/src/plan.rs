//! What a read will cost before it starts: which in-block bytes each block needs, what a fill
//! of a block fetches given what it holds (range fills, whole blocks, read-ahead for sequential
//! reads), and the plan that labels a response hit, miss or partial.

use crate::block::{Block, MAX_SPANS};
use crate::cache::Fill;
use crate::classify::Store;
use crate::range::block_span;
use crate::reader::{BlockReader, Plan, PLAN};

impl BlockReader {
    /// The block's length and the in-block bytes `lo..hi` this response needs of it.
    pub(crate) fn need(&self, index: u64) -> (u32, u32, u32) {
        let (start, len) = block_span(index, self.bs(), self.target.map.size);
        let lo = self.first.max(start) - start;
        let hi = (self.last + 1).min(start + len) - start;
        (len as u32, lo as u32, hi as u32)
    }

    /// The in-block bytes a fill of `index` fetches, given what the block holds.
    pub(crate) fn fetch(&self, index: u64, held: Option<&Block>) -> Option<(u32, u32)> {
        let (len, lo, hi) = self.need(index);
        let whole = self.whole
            || self.cache.settings.fill == Fill::Block
            || self.store(index) == Store::Metadata
            || held.is_some_and(|b| b.spans() >= MAX_SPANS);
        let Some(b) = held else {
            return Some(if whole { (0, len) } else { (lo, hi) });
        };
        if self.whole {
            return b.missing(0, len);
        }
        // Everything a client read needs is here (a block at MAX_SPANS too): nothing to fetch.
        let (a, z) = b.missing(lo, hi)?;
        if whole {
            return b.missing(0, len);
        }
        // A read that starts where a cached span ends is sequential: read the block ahead.
        if a == lo && b.span_ends_at(lo) {
            return b.missing(a, len).or(Some((a, z)));
        }
        Some((a, z))
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
                let b = self.cache.lookup(&key, store).await;
                self.planned[slot] = b.clone();
                b
            } else if self.cache.contains(&key, store) {
                plan.cached += 1;
                continue;
            } else {
                None
            };
            let fetch = self.fetch(i, held.as_ref());
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
