//! The per-response reader: serves the bytes of one response block by block, in order, each as
//! soon as it is available, claiming runs of missing blocks for single-flight fills and waiting
//! on fills other requests hold.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use floe_core::fleet::{Fleet, PeerRef};
use floe_core::OriginReader;
use tokio::sync::{oneshot, watch};

pub(crate) use crate::adopt::{adopt, Adopted, Pending};
use crate::block::{Block, Span};
use crate::cache::BlockCache;
use crate::classify::Store;
use crate::fill::{store_piece, unshared, Served};
use crate::inflight::{self, Claim, FillError, Slot};
use crate::store::BlockKey;
use crate::tap::{ServeError, Sink, Tap};
pub use crate::target::Target;
use crate::trail::Trail;

/// Blocks a response looks up before it starts (to label it hit/miss/partial exactly); the
/// entries are kept and served, so planning costs no extra lookups.
pub(crate) const PLAN: usize = 8;
/// Times a read waits on other reads' fills of one block that do not bring its bytes before it
/// fetches them itself, beside the fill in flight (parallel readers of different ranges of one
/// block, DuckDB's column chunks, must not queue behind each other's round trips).
const MAX_WAITS: usize = 1;

/// What a response will cost, from the plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plan {
    /// Blocks that hold every byte the response needs.
    pub cached: u64,
    /// Bytes the response will fetch from the origin.
    pub missing_bytes: u64,
    /// The first block with bytes to fetch.
    pub first_missing: Option<u64>,
}

/// Serves bytes `first..=last` of one object version.
pub struct BlockReader {
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) origin: Arc<dyn OriginReader>,
    pub(crate) target: Target,
    pub(crate) first: u64,
    pub(crate) last: u64,
    /// Fill whole blocks whatever `Fill` says, and return only once they are stored (warming).
    pub(crate) whole: bool,
    pub(crate) planned: [Option<Block>; PLAN],
    /// Blocks claimed ahead by this reader's runs (with the in-block bytes its own fill
    /// fetches) or by others' fills it met while claiming.
    pub(crate) pending: VecDeque<Pending>,
    /// The body of the last fill this reader started.
    pub(crate) tap: Option<Tap>,
    /// The fleet whose owners fill this reader's misses (`None`: the origin does; always for
    /// a reader answering a peer, so asks never travel further).
    pub(crate) fleet: Option<Arc<dyn Fleet>>,
    /// Misses go to their owners (false when answering a peer: only donors are asked).
    pub(crate) forward: bool,
    /// Keep copies of blocks peers send (false: only their owners keep them).
    pub(crate) replica: bool,
    /// A hand-over: fetch only from this peer (what it holds), never the origin.
    pub(crate) only_from: Option<PeerRef>,
    /// A block looked up or claimed before the response began: in a fleet, the first with
    /// missing bytes; otherwise the first its header waits for, or claimed ahead of it.
    pub(crate) primed: Option<(u64, Result<Got, FillError>)>,
    /// Where this reader's bytes came from (the header's label and origin bytes).
    pub(crate) trail: Trail,
    /// Where the first fill this reader started got its bytes.
    pub(crate) served: Option<oneshot::Receiver<Served>>,
    /// Where this reader's fills end, exclusive: past `last` when the read starts a known
    /// column chunk (looked up once, on the first miss: see `hinted`).
    pub(crate) fill_end: u64,
    /// Whether `fill_end` has been looked up.
    pub(crate) hinted: bool,
}

/// How a block's bytes come.
pub(crate) enum Got {
    /// All here.
    Ready(Bytes),
    /// This reader's own fill fetches in-block bytes `from..to`; `held` has the rest.
    Own {
        held: Option<Block>,
        from: u32,
        to: u32,
        rx: watch::Receiver<Slot>,
    },
}

impl BlockReader {
    /// A reader for bytes `first..=last` of `target`; `whole` fills whole blocks (warming).
    pub fn new(
        cache: Arc<BlockCache>,
        origin: Arc<dyn OriginReader>,
        target: Target,
        (first, last): (u64, u64),
        whole: bool,
    ) -> Self {
        Self {
            cache,
            origin,
            target,
            first,
            last,
            whole,
            planned: Default::default(),
            pending: VecDeque::new(),
            tap: None,
            fleet: None,
            forward: false,
            replica: true,
            only_from: None,
            primed: None,
            trail: Trail::default(),
            served: None,
            fill_end: last.saturating_add(1),
            hinted: false,
        }
    }

    pub(crate) fn bs(&self) -> u64 {
        self.cache.settings.block_bytes
    }

    pub(crate) fn key(&self, index: u64) -> BlockKey {
        self.target.block_key(index, self.bs())
    }

    pub(crate) fn store(&self, index: u64) -> Store {
        let t = &self.target;
        self.cache.store_of(
            t.map.class,
            (&t.bucket_key, &t.object_key),
            index,
            t.map.size,
        )
    }

    /// Puts the bytes this response needs of block `index` into `sink`: from the cache, from
    /// another read's fill, or from this reader's own fill as its body arrives.
    pub async fn serve(&mut self, index: u64, sink: &mut dyn Sink) -> Result<(), ServeError> {
        let (_, lo, hi) = self.need(index);
        let (held, from, to, rx) = match self.block(index).await? {
            Got::Ready(b) => return put(sink, b).await,
            Got::Own { held, from, to, rx } => (held, from, to, rx),
        };
        let start = index * self.bs();
        let (a, z) = (lo.max(from), hi.min(to));
        let mut rest = None;
        for (x, y, own) in [(lo, a, false), (a, z, true), (z.max(lo), hi, false)] {
            if x >= y {
                continue;
            }
            // Warms (whole) return once their blocks are stored: they take the finished fill.
            let from_tap = own
                && !self.whole
                && self
                    .tap
                    .as_ref()
                    .is_some_and(|t| t.ahead(start + u64::from(x)));
            if from_tap {
                if let Some(t) = self.tap.as_mut() {
                    t.copy(start + u64::from(x), start + u64::from(y), sink)
                        .await?;
                }
                continue;
            }
            let piece = match held.as_ref().and_then(|b| b.slice(x, y)) {
                Some(p) if !own => p,
                // Not where the plan said: take it from the finished fill.
                _ => {
                    if rest.is_none() {
                        rest = Some(inflight::wait(rx.clone()).await?);
                    }
                    rest.as_ref()
                        .and_then(|b| b.slice(x, y))
                        .ok_or_else(|| FillError::Failed("a fill did not bring the bytes".into()))?
                }
            };
            put(sink, piece).await?;
        }
        Ok(())
    }

    /// Before a response's header, for an object whose name is never rewritten: starts block
    /// `index` and keeps it for [`BlockReader::serve`]. `true` once this reader's own fill has
    /// its first bytes in (the origin answered for this version): the rest streams after the
    /// header, so a cold read's client is not kept waiting for its whole body. `false`: the
    /// bytes are cached or come from another read's fill; the caller holds them.
    pub(crate) async fn cut_through(&mut self, index: u64) -> Result<bool, ServeError> {
        let got = self.block(index).await?;
        let streams = match &got {
            Got::Own { from, .. } if !self.whole => {
                let (_, lo, _) = self.need(index);
                let at = index * self.bs() + u64::from(lo.max(*from));
                match self.tap.as_mut() {
                    Some(t) if t.ahead(at) => {
                        t.first().await?;
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        self.primed = Some((index, Ok(got)));
        Ok(streams)
    }

    /// Where the bytes this response needs of block `index` come from.
    pub(crate) async fn block(&mut self, index: u64) -> Result<Got, FillError> {
        if self.primed.as_ref().is_some_and(|(i, _)| *i == index) {
            if let Some((_, got)) = self.primed.take() {
                return got;
            }
        }
        let (_, lo, hi) = self.need(index);
        let key = self.key(index);
        let store = self.store(index);
        let stats = self.cache.pick(store, &key.bucket).1;
        if self.fleet.is_some() {
            self.cache.hot.touch(&key, self.target.map.size);
        }
        let mut wait = None;
        if self.pending.front().is_some_and(|p| p.index == index) {
            if let Some(Pending { rx, own, .. }) = self.pending.pop_front() {
                if let Some((from, to)) = own {
                    stats.misses.fetch_add(1, Ordering::Relaxed);
                    return Ok(Got::Own {
                        held: None,
                        from,
                        to,
                        rx,
                    });
                }
                wait = Some(rx);
            }
        } else if store == Store::Data {
            self.cache.sketch.touch(key.stable_hash());
        }
        let slot = index.checked_sub(self.block_range().0).map(|s| s as usize);
        let mut held = slot
            .and_then(|s| self.planned.get_mut(s))
            .and_then(Option::take);
        if wait.is_none() {
            if held.is_none() {
                held = self.cache.lookup(&key, store, self.need(index)).await;
            }
            if let Some(b) = held.as_ref().and_then(|b| b.slice(lo, hi)) {
                stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Got::Ready(b));
            }
        }
        stats.misses.fetch_add(1, Ordering::Relaxed);
        let mut waits = 0;
        let mut failed_over = false;
        loop {
            if let Some(rx) = wait.take() {
                match inflight::wait(rx).await {
                    Ok(b) => {
                        if let Some(bytes) = b.slice(lo, hi) {
                            return Ok(Got::Ready(bytes));
                        }
                        self.trail.unwait(); // it did not bring this read's bytes
                    }
                    // Another read's fill died (its origin GET failed or was cut): this read
                    // claims the block and fetches it itself, once, rather than fail with it.
                    Err(FillError::Failed(_)) if !failed_over => {
                        failed_over = true;
                        self.trail.unwait();
                    }
                    Err(e) => return Err(e),
                }
            }
            match self.cache.inflight.claim(&key) {
                Claim::Theirs(rx) if waits < MAX_WAITS => {
                    waits += 1;
                    self.trail.waiting();
                    wait = Some(rx);
                }
                // Other reads keep filling other bytes of this block: fetch ours unshared
                // rather than wait without end.
                Claim::Theirs(_) => {
                    let (t, s) = (&self.target, store);
                    let start = index * self.bs();
                    let range = (start + u64::from(lo), start + u64::from(hi));
                    self.trail.fetching(1, range.1 - range.0);
                    let tally = self.trail.tally();
                    let bytes = unshared(&self.cache, &self.origin, t, s, range, &tally).await?;
                    let len = self.need(index).0;
                    let piece = Span {
                        off: lo,
                        bytes: bytes.clone(),
                    };
                    tokio::spawn(store_piece(self.cache.clone(), key, s, len, piece));
                    return Ok(Got::Ready(bytes));
                }
                Claim::Mine(tx) => {
                    // Another fill may have stored bytes and released its claim since we
                    // looked: look again before going to the origin.
                    let held = self.cache.lookup(&key, store, self.need(index)).await;
                    if let Some(b) = held.as_ref().and_then(|b| b.slice(lo, hi)) {
                        let _ = tx.send(held.map(Ok));
                        self.cache.inflight.release(&key);
                        return Ok(Got::Ready(b));
                    }
                    let rx = tx.subscribe();
                    return match self.start_fill(index, key.clone(), tx, held.clone()) {
                        Some((from, to)) => Ok(Got::Own { held, from, to, rx }),
                        None => Err(FillError::Failed(
                            "a missing range with nothing to fetch".into(),
                        )),
                    };
                }
            }
        }
    }

    /// Takes over the fill the resolving GET started, when it covers this response (its
    /// origin bytes are this response's either way: the GET was made for it).
    pub fn attach(&mut self, a: Adopted) {
        self.trail.adopt(a.tally.clone());
        let sent = match a.pending.is_empty() {
            true => 0, // nothing claimed: the body was dropped unread
            false => a.last - a.first + 1,
        };
        self.trail.fetching(a.pending.len(), sent);
        if a.first <= self.first && self.last <= a.last {
            self.pending.extend(a.pending);
            self.tap = a.tap;
        }
    }
}

async fn put(sink: &mut dyn Sink, b: Bytes) -> Result<(), ServeError> {
    if b.is_empty() {
        return Ok(());
    }
    sink.put(b).await
}
