//! The per-response reader: serves the bytes of one response block by block, in order, each as
//! soon as it is available, claiming runs of missing blocks for single-flight fills and waiting
//! on fills other requests hold.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use floe_core::{BucketName, ObjectKey, OriginError, OriginReader};
use tokio::sync::watch;

use crate::block::{Block, Span, MAX_SPANS};
use crate::cache::{BlockCache, Fill};
use crate::classify::Store;
use crate::inflight::{self, Claim, FillError, Slot};
use crate::mapping::Mapping;
use crate::range::block_span;
use crate::store::BlockKey;

/// Blocks a response looks up before it starts (to label it hit/miss/partial exactly); the
/// entries are kept and served, so planning costs no extra lookups.
const PLAN: usize = 8;
/// Times a read waits on other reads' fills of one block that do not bring its bytes before it
/// fetches its own bytes unshared.
const MAX_WAITS: usize = 8;

/// Identity of the object a reader serves.
#[derive(Clone)]
pub struct Target {
    /// Bucket (validated).
    pub bucket: BucketName,
    /// Key (validated).
    pub key: ObjectKey,
    /// Shared bucket text for block keys.
    pub bucket_key: Arc<str>,
    /// Shared key text for block keys.
    pub object_key: Arc<str>,
    /// The resolved version.
    pub map: Arc<Mapping>,
}

/// What a response will cost, from the plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plan {
    /// Blocks that hold every byte the response needs.
    pub cached: u64,
    /// Bytes the response will fetch from the origin.
    pub missing_bytes: u64,
}

/// Serves bytes `first..=last` of one object version.
pub struct BlockReader {
    cache: Arc<BlockCache>,
    origin: Arc<dyn OriginReader>,
    target: Target,
    first: u64,
    last: u64,
    /// Fill whole blocks whatever `Fill` says (warming).
    whole: bool,
    planned: [Option<Block>; PLAN],
    pending: VecDeque<(u64, watch::Receiver<Slot>)>,
}

/// One block of a fill run: its key, claim, the in-block bytes to fetch and what it held.
struct RunItem {
    index: u64,
    key: BlockKey,
    tx: watch::Sender<Slot>,
    from: u32,
    to: u32,
    held: Option<Block>,
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
        }
    }

    fn bs(&self) -> u64 {
        self.cache.settings.block_bytes
    }

    fn key(&self, index: u64) -> BlockKey {
        BlockKey {
            bucket: self.target.bucket_key.clone(),
            key: self.target.object_key.clone(),
            etag: self.target.map.etag_key.clone(),
            block_bytes: self.bs() as u32,
            index,
        }
    }

    fn store(&self, index: u64) -> Store {
        self.cache
            .store_of(self.target.map.class, index, self.target.map.size)
    }

    /// The block's length and the in-block bytes `lo..hi` this response needs of it.
    fn need(&self, index: u64) -> (u32, u32, u32) {
        let (start, len) = block_span(index, self.bs(), self.target.map.size);
        let lo = self.first.max(start) - start;
        let hi = (self.last + 1).min(start + len) - start;
        (len as u32, lo as u32, hi as u32)
    }

    /// The in-block bytes a fill of `index` fetches, given what the block holds.
    fn fetch(&self, index: u64, held: Option<&Block>) -> Option<(u32, u32)> {
        let (len, lo, hi) = self.need(index);
        let whole = self.whole
            || self.cache.settings.fill == Fill::Block
            || self.store(index) == Store::Metadata
            || held.is_some_and(|b| b.spans() >= MAX_SPANS);
        let Some(b) = held else {
            return Some(if whole { (0, len) } else { (lo, hi) });
        };
        if whole {
            return b.missing(0, len);
        }
        let (a, z) = b.missing(lo, hi)?;
        // A read that starts where a cached span ends is sequential: read the block ahead.
        if a == lo && b.span_ends_at(lo) {
            return b.missing(a, len).or(Some((a, z)));
        }
        Some((a, z))
    }

    fn block_range(&self) -> (u64, u64) {
        (self.first / self.bs(), self.last / self.bs())
    }

    /// Looks up the first blocks of the response and says what it will cost; the rest are
    /// judged by presence alone (a partial entry there counts as cached).
    pub async fn plan(&mut self) -> Plan {
        let mut plan = Plan::default();
        let (b0, b1) = self.block_range();
        for i in b0..=b1 {
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
            match self.fetch(i, held.as_ref()) {
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

    /// The bytes this response needs of block `index`, from the cache or a fill.
    pub async fn block(&mut self, index: u64) -> Result<Bytes, FillError> {
        let (_, lo, hi) = self.need(index);
        let key = self.key(index);
        let store = self.store(index);
        let stats = self.cache.pick(store).1;
        let mut wait = None;
        if self.pending.front().is_some_and(|(i, _)| *i == index) {
            wait = self.pending.pop_front().map(|(_, rx)| rx);
        } else if store == Store::Data {
            self.cache.sketch.touch(key.stable_hash());
        }
        let slot = index.checked_sub(self.block_range().0).map(|s| s as usize);
        let mut held = slot
            .and_then(|s| self.planned.get_mut(s))
            .and_then(Option::take);
        if wait.is_none() {
            if held.is_none() {
                held = self.cache.lookup(&key, store).await;
            }
            if let Some(b) = held.as_ref().and_then(|b| b.slice(lo, hi)) {
                stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(b);
            }
        }
        stats.misses.fetch_add(1, Ordering::Relaxed);
        let mut waits = 0;
        loop {
            if let Some(rx) = wait.take() {
                let b = inflight::wait(rx).await?;
                if let Some(bytes) = b.slice(lo, hi) {
                    return Ok(bytes);
                }
            }
            match self.cache.inflight.claim(&key) {
                Claim::Theirs(rx) if waits < MAX_WAITS => {
                    waits += 1;
                    wait = Some(rx);
                }
                // Other reads keep filling other bytes of this block: fetch ours unshared
                // rather than wait without end.
                Claim::Theirs(_) => return self.unshared(index, lo, hi).await,
                Claim::Mine(tx) => {
                    // Another fill may have stored bytes and released its claim since we
                    // looked: look again before going to the origin.
                    let held = self.cache.lookup(&key, store).await;
                    if let Some(b) = held.as_ref().and_then(|b| b.slice(lo, hi)) {
                        let _ = tx.send(held.map(Ok));
                        self.cache.inflight.release(&key);
                        return Ok(b);
                    }
                    let own = tx.subscribe();
                    self.start_fill(index, key.clone(), tx, held);
                    let b = inflight::wait(own).await?;
                    // Our own fill holds what we asked for (merge keeps `missing`'s promise).
                    return b
                        .slice(lo, hi)
                        .ok_or_else(|| FillError::Failed("a fill did not bring the bytes".into()));
                }
            }
        }
    }

    /// Bytes `lo..hi` of block `index` straight from the origin, not stored.
    async fn unshared(&self, index: u64, lo: u32, hi: u32) -> Result<Bytes, FillError> {
        let start = index * self.bs();
        let t = &self.target;
        let mut body = self
            .origin
            .get_range(
                &t.bucket,
                &t.key,
                &t.map.etag,
                start + u64::from(lo),
                start + u64::from(hi) - 1,
            )
            .await
            .map_err(to_fill_error)?;
        let mut buf = bytes::BytesMut::with_capacity((hi - lo) as usize);
        while let Some(c) = body.next().await.map_err(to_fill_error)? {
            buf.extend_from_slice(&c);
        }
        if buf.len() != (hi - lo) as usize {
            return Err(FillError::Failed("origin body ended early".into()));
        }
        let s = self.store(index);
        let fetched = buf.len() as u64;
        self.cache
            .pick(s)
            .1
            .origin_bytes
            .fetch_add(fetched, Ordering::Relaxed);
        Ok(buf.freeze())
    }

    /// Claims the blocks after `index` whose fetches continue its own, and spawns one ranged
    /// GET for the run.
    fn start_fill(
        &mut self,
        index: u64,
        key: BlockKey,
        tx: watch::Sender<Slot>,
        held: Option<Block>,
    ) {
        let Some((from, to)) = self.fetch(index, held.as_ref()) else {
            let _ = tx.send(held.map(Ok));
            self.cache.inflight.release(&key);
            return;
        };
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
            .min(index + self.cache.settings.max_run_blocks - 1);
        for j in index + 1..=last {
            let kj = self.key(j);
            let sj = self.store(j);
            if self.cache.contains(&kj, sj) {
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
                    self.pending.push_back((j, txj.subscribe()));
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
                    self.pending.push_back((j, rx));
                    break;
                }
            }
        }
        tokio::spawn(fill(
            self.cache.clone(),
            self.origin.clone(),
            self.target.clone(),
            run,
        ));
    }
}

/// Fetches a run of adjacent block pieces with one ranged GET (If-Match on the ETag), storing
/// and publishing each block the moment its piece is complete.
async fn fill(cache: Arc<BlockCache>, origin: Arc<dyn OriginReader>, t: Target, run: Vec<RunItem>) {
    let bs = cache.settings.block_bytes;
    let size = t.map.size;
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return;
    };
    let start = first.index * bs + u64::from(first.from);
    let end = last.index * bs + u64::from(last.to);
    let mut items = run.into_iter();
    let fail = |e: FillError, cur: Option<RunItem>, rest: &mut dyn Iterator<Item = RunItem>| {
        for it in cur.into_iter().chain(rest) {
            let _ = it.tx.send(Some(Err(e.clone())));
            cache.inflight.release(&it.key);
        }
    };
    let mut body = match origin
        .get_range(&t.bucket, &t.key, &t.map.etag, start, end - 1)
        .await
    {
        Ok(b) => b,
        Err(e) => return fail(to_fill_error(e), None, &mut items),
    };
    let mut cur = items.next();
    // One exact-size buffer per block piece: a stored piece must not keep a larger allocation
    // alive (the stores weigh the bytes held, and DRAM ceilings must hold in RSS too).
    let mut buf = bytes::BytesMut::new();
    while cur.is_some() {
        let mut chunk = match body.next().await {
            Ok(Some(c)) => c,
            Ok(None) => {
                let e = FillError::Failed("origin body ended early".into());
                return fail(e, cur, &mut items);
            }
            Err(e) => return fail(to_fill_error(e), cur, &mut items),
        };
        while !chunk.is_empty() {
            let Some(it) = cur.take() else { break };
            let want = (it.to - it.from) as usize;
            if buf.capacity() == 0 {
                buf.reserve(want);
            }
            let take = (want - buf.len()).min(chunk.len());
            buf.extend_from_slice(&chunk.split_to(take));
            if buf.len() < want {
                cur = Some(it);
                continue;
            }
            publish(&cache, &t, it, buf.split().freeze(), size);
            cur = items.next();
        }
    }
    // Drain to the end so the connection goes back to the pool.
    while let Ok(Some(_)) = body.next().await {}
}

/// Merges a fetched piece into what the block held, stores it and hands it to the waiters.
fn publish(cache: &BlockCache, t: &Target, it: RunItem, bytes: Bytes, size: u64) {
    let bs = cache.settings.block_bytes;
    let len = block_span(it.index, bs, size).1 as u32;
    let s = cache.store_of(t.map.class, it.index, size);
    let fetched = bytes.len() as u64;
    let piece = Span {
        off: it.from,
        bytes,
    };
    let block = match &it.held {
        Some(b) => b.merge(piece),
        None => Block::of(len, piece),
    };
    cache
        .pick(s)
        .1
        .origin_bytes
        .fetch_add(fetched, Ordering::Relaxed);
    cache.admit(it.key.clone(), block.clone(), s);
    let _ = it.tx.send(Some(Ok(block)));
    cache.inflight.release(&it.key);
}

fn to_fill_error(e: OriginError) -> FillError {
    match e {
        OriginError::Changed | OriginError::NotFound => FillError::Changed,
        other => FillError::Failed(other.to_string()),
    }
}
