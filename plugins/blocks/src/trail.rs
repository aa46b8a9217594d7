//! Where a response's bytes came from, as its reader got them: the label and the origin bytes
//! its header tells, and the exact origin bytes its log line and metrics count.
//!
//! A response's header goes out once its first bytes are in hand, before the rest of the body
//! is fetched. So the header tells what its reader had settled by then: the claims it took on
//! the blocks it serves first (this read's own fill, another read's fill it waits on, or the
//! cache), and what those fills fetch from the origin. Bytes fetched after the header are
//! counted exactly in [`Trail::origin_bytes`], which the request's log line and metrics take
//! once the body is done. A byte the origin sent is counted by the one response whose fill
//! claimed it, never by the reads that waited on that fill.

use floe_filter::CacheOutcome;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::asks::PeerSource;

use crate::inflight::Claim;
use crate::reader::{BlockReader, Got, Pending, Plan, PLAN};

/// What a reader has settled about where its bytes come from.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    /// Bytes the fills this reader started got from the origin, counted as they arrive (the
    /// fills hold a clone).
    origin_bytes: Arc<AtomicU64>,
    /// Origin bytes of the fills this reader started that go to the origin first, counted
    /// when each starts (what the header can know before the body).
    claimed: u64,
    /// Blocks this reader's own fills fetch.
    fetched: u32,
    /// Blocks whose bytes come from another read's fill.
    waited: u32,
}

impl Trail {
    /// The counter a fill this reader starts adds its origin bytes to.
    pub(crate) fn tally(&self) -> Arc<AtomicU64> {
        self.origin_bytes.clone()
    }

    /// This reader started a fill of `blocks` blocks that fetches `origin` bytes from the
    /// origin (0 when it asks a peer first).
    pub(crate) fn fetching(&mut self, blocks: usize, origin: u64) {
        self.fetched = self.fetched.saturating_add(blocks as u32);
        self.claimed += origin;
    }

    /// This reader waits on another read's fill for one block.
    pub(crate) fn waiting(&mut self) {
        self.waited = self.waited.saturating_add(1);
    }

    /// A wait on another read's fill did not bring this read's bytes (its fill failed, or
    /// it fetched other bytes of the block): this read fetches them itself.
    pub(crate) fn unwait(&mut self) {
        self.waited = self.waited.saturating_sub(1);
    }

    /// Takes over `other`'s counter (the fill of the GET that resolved the version).
    pub(crate) fn adopt(&mut self, counter: Arc<AtomicU64>) {
        self.origin_bytes = counter;
    }

    /// Origin bytes the header tells: those of the fills started before it.
    pub(crate) fn claimed(&self) -> u64 {
        self.claimed
    }

    /// Every origin byte this reader's fills got so far (exact once the body is done).
    pub(crate) fn origin_bytes(&self) -> u64 {
        self.origin_bytes.load(Ordering::Relaxed)
    }

    /// The header's `x-floe-cache` for a body read planned as `plan`, given where the first
    /// fetch went in a fleet (`peer`).
    pub(crate) fn label(&self, plan: &Plan, peer: Option<PeerSource>) -> CacheOutcome {
        match peer {
            Some(PeerSource::Hit) => return CacheOutcome::HitPeer,
            Some(PeerSource::Fill) => return CacheOutcome::FillPeer,
            None => {}
        }
        match (self.fetched, self.waited) {
            (0, 0) => CacheOutcome::Hit,
            (0, _) => CacheOutcome::Wait,
            _ if plan.cached > 0 || self.waited > 0 => CacheOutcome::Partial,
            _ => CacheOutcome::Miss,
        }
    }
}

impl BlockReader {
    /// Before a response's header, once its first blocks are held from `next` on: claims the
    /// first block after them that the plan did not find held, without waiting for its bytes
    /// (this read's fill starts now, or it joins another's), so the header can say where the
    /// response's bytes come from. Only blocks the plan looked up are judged.
    pub(crate) async fn claim_ahead(&mut self, next: u64) {
        let (b0, b1) = self.block_range();
        let Some(index) = (next..=b1.min(b0 + PLAN as u64 - 1)).find(|i| !self.holds(*i)) else {
            return;
        };
        let claimed = self.primed.as_ref().is_some_and(|(i, _)| *i == index)
            || self.pending.iter().any(|p| p.index == index);
        if claimed {
            return;
        }
        let key = self.key(index);
        match self.cache.inflight.claim(&key) {
            Claim::Theirs(rx) => {
                self.trail.waiting();
                self.pending.push_front(Pending {
                    index,
                    rx,
                    own: None,
                });
            }
            Claim::Mine(tx) => {
                let (_, lo, hi) = self.need(index);
                let slot = (index - b0) as usize;
                let mut held = self.planned.get_mut(slot).and_then(Option::take);
                if held.is_none() {
                    held = self
                        .cache
                        .lookup(&key, self.store(index), self.need(index))
                        .await;
                }
                if let Some(bytes) = held.as_ref().and_then(|b| b.slice(lo, hi)) {
                    let _ = tx.send(held.map(Ok));
                    self.cache.inflight.release(&key);
                    self.primed = Some((index, Ok(Got::Ready(bytes))));
                    return;
                }
                let rx = tx.subscribe();
                let got = match self.start_fill(index, key, tx, held.clone()) {
                    Some((from, to)) => Ok(Got::Own { held, from, to, rx }),
                    None => Err(crate::inflight::FillError::Failed(
                        "a missing range with nothing to fetch".into(),
                    )),
                };
                self.primed = Some((index, got));
            }
        }
    }

    /// Whether the plan found block `index` holding every byte the response needs of it.
    fn holds(&self, index: u64) -> bool {
        let (_, lo, hi) = self.need(index);
        let slot = index.saturating_sub(self.block_range().0) as usize;
        self.planned
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|b| b.slice(lo, hi).is_some())
    }
}
