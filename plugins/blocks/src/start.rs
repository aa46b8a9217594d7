//! The fills a reader starts: a run of missing blocks as one ranged GET whose body it taps,
//! and beside it the fill of a partly held block the run stopped at.

use floe_core::fleet::PeerRef;
use tokio::sync::{mpsc, oneshot, watch};

use crate::block::Block;
use crate::classify::Store;
use crate::fill::{fill, RunItem, Source};
use crate::inflight::{Claim, Slot};
use crate::reader::{BlockReader, Pending};
use crate::store::BlockKey;
use crate::tap::Tap;

impl BlockReader {
    /// Claims the blocks after `index` whose fetches continue its own, spawns one ranged GET
    /// for the run and taps its body. Returns the in-block bytes fetched for `index`.
    pub(crate) fn start_fill(
        &mut self,
        index: u64,
        key: BlockKey,
        tx: watch::Sender<Slot>,
        held: Option<Block>,
    ) -> Option<(u32, u32)> {
        self.hint();
        let Some((from, to)) = self.fetch(index, held.as_ref()) else {
            let _ = tx.send(held.map(Ok));
            self.cache.inflight.release(&key);
            return None;
        };
        self.note_touch(index, held.as_ref());
        let mut run = vec![RunItem {
            index,
            key,
            tx,
            from,
            to,
            held,
        }];
        let last = self
            .block_range()
            .1
            .max(self.fill_end.saturating_sub(1) / self.bs())
            .min(index + self.cache.settings.max_run_blocks - 1);
        let mut theirs = None;
        let mut held_next = None;
        // The run's source, computed once: every block of the run shares it.
        let source = if self.fleet.is_some() {
            self.source_of(index)
        } else {
            None
        };
        for j in index + 1..=last {
            let kj = self.key(j);
            let sj = self.store(j);
            if !self.joins_run(&source, j) {
                break;
            }
            if self.cache.contains(&kj, sj) {
                held_next = Some(j);
                break;
            }
            if sj == Store::Data {
                self.cache.sketch.touch(kj.stable_hash());
            }
            let Some((from, to)) = self.fetch(j, None) else {
                break;
            };
            match self.cache.inflight.claim(&kj) {
                Claim::Mine(txj) => {
                    // The response goes on into a block that is not cached: re-fetching the
                    // cached tail of the previous block costs less than another round trip.
                    if let Some(prev) = run.last_mut() {
                        prev.to = self.need(prev.index).0;
                    }
                    run.push(RunItem {
                        index: j,
                        key: kj,
                        tx: txj,
                        from,
                        to,
                        held: None,
                    });
                }
                Claim::Theirs(rx) => {
                    theirs = Some((j, rx));
                    break;
                }
            }
        }
        for it in run.iter().skip(1) {
            self.pending.push_back(Pending {
                index: it.index,
                rx: it.tx.subscribe(),
                own: Some((it.from, it.to)),
            });
        }
        if let Some((index, rx)) = theirs {
            self.trail.waiting();
            self.pending.push_back(Pending {
                index,
                rx,
                own: None,
            });
        }
        if let Some(j) = held_next {
            self.fill_beside(j);
        }
        let bs = self.bs();
        let first = run.first().map(|it| (it.from, it.to));
        let end = run.last().map_or(0, |it| it.index * bs + u64::from(it.to));
        let result = run.first().map(|it| it.tx.subscribe());
        let (ttx, trx) = mpsc::unbounded_channel();
        if let (Some((from, _)), Some(result)) = (first, result) {
            self.tap = Some(Tap::new(trx, index * bs + u64::from(from), end, result));
        }
        let report = self.served.is_none().then(|| {
            let (tx, rx) = oneshot::channel();
            self.served = Some(rx);
            tx
        });
        let asks = self.asks(index);
        let start = index * bs + first.map_or(0, |(from, _)| u64::from(from));
        let to_origin = if asks.is_empty() { end - start } else { 0 };
        self.trail.fetching(run.len(), to_origin);
        let source = self.source(asks, report);
        tokio::spawn(fill(
            self.cache.clone(),
            source,
            self.target.clone(),
            run,
            None,
            Some(ttx),
        ));
        first
    }

    /// Block `j`, which a run stopped at because the cache holds some of it, when it lacks
    /// bytes this response needs: its fill starts now, beside the run's, so the response makes
    /// its round trips at once. Started when the response reached it, a 1 MiB read across a
    /// partly held block took two round trips (70 ms against the origin's 35).
    fn fill_beside(&mut self, j: u64) {
        let (b0, b1) = self.block_range();
        if j > b1 {
            return; // past the response: a column-chunk run's tail, not this read's bytes
        }
        let Some(held) = j
            .checked_sub(b0)
            .and_then(|slot| self.planned.get(slot as usize))
            .cloned()
            .flatten()
        else {
            return;
        };
        let (_, lo, hi) = self.need(j);
        if held.slice(lo, hi).is_some() {
            return;
        }
        let key = self.key(j);
        // Another read filling it: `block` waits on that fill or fetches beside it, as before.
        let Claim::Mine(tx) = self.cache.inflight.claim(&key) else {
            return;
        };
        let Some((from, to)) = self.fetch(j, Some(&held)) else {
            let _ = tx.send(Some(Ok(held)));
            self.cache.inflight.release(&key);
            return;
        };
        self.note_touch(j, Some(&held));
        self.pending.push_back(Pending {
            index: j,
            rx: tx.subscribe(),
            own: None,
        });
        let asks = self.asks(j);
        let to_origin = if asks.is_empty() { to - from } else { 0 };
        self.trail.fetching(1, u64::from(to_origin));
        let source = self.source(asks, None);
        let item = RunItem {
            index: j,
            key,
            tx,
            from,
            to,
            held: Some(held),
        };
        tokio::spawn(fill(
            self.cache.clone(),
            source,
            self.target.clone(),
            vec![item],
            None,
            None,
        ));
    }

    /// Where a fill this reader starts gets its bytes: `asks` first, then the origin.
    fn source(
        &self,
        asks: Vec<(PeerRef, bool)>,
        report: Option<oneshot::Sender<crate::fill::Served>>,
    ) -> Source {
        Source {
            origin: self.origin.clone(),
            fleet: self.fleet.clone(),
            tally: Some(self.trail.tally()),
            asks,
            replica: self.replica,
            from_owner: false,
            no_origin: self.only_from.is_some(),
            report,
        }
    }

    /// Who a fill of block `index` asks before the origin: the hand-over's peer, the owner,
    /// or the donors.
    fn asks(&self, index: u64) -> Vec<(PeerRef, bool)> {
        match (&self.only_from, self.owner(index)) {
            (Some(p), _) => vec![(p.clone(), true)],
            (None, Some((_, o))) => vec![(o, false)],
            (None, None) => self.donors(index).into_iter().map(|d| (d, true)).collect(),
        }
    }
}
