//! Fills: one ranged GET (If-Match on the resolved ETag) for a run of adjacent block pieces,
//! each block stored and published the moment its piece is complete; the reader that started
//! the run gets the body as it arrives (the tap), so its client is not kept waiting for whole
//! pieces.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use floe_core::fleet::{Fleet, PeerError, PeerRef};

use crate::asks::{BlockAsk, PeerSource};
use floe_core::{ByteStream, OriginError, OriginReader};
use tokio::sync::{mpsc, oneshot, watch};

use crate::block::{Block, Span, MAX_SPANS};
use crate::cache::BlockCache;
use crate::classify::Store;
use crate::inflight::{self, Claim, FillError, Slot};
use crate::piece::Piece;
use crate::pool::BufferPool;
use crate::range::block_span;
use crate::reader::Target;
use crate::store::BlockKey;

/// One block of a fill run: its key, claim, the in-block bytes to fetch and what it held.
pub(crate) struct RunItem {
    pub(crate) index: u64,
    pub(crate) key: BlockKey,
    pub(crate) tx: watch::Sender<Slot>,
    pub(crate) from: u32,
    pub(crate) to: u32,
    pub(crate) held: Option<Block>,
}

/// Where a fill's bytes came from (reported once its body began).
#[derive(Debug, Clone)]
pub(crate) enum Served {
    /// The origin.
    Origin,
    /// The run's owner, which had them (`Hit`) or filled them (`Fill`).
    Peer(PeerSource, Arc<str>),
}

/// Where a fill gets its bytes: the run's owner first when it is a peer, or the donors that
/// may hold a block this node owns (cached only), in order; the origin otherwise and whenever
/// they fail.
pub(crate) struct Source {
    pub(crate) origin: Arc<dyn OriginReader>,
    pub(crate) fleet: Option<Arc<dyn Fleet>>,
    /// Peers to ask, in order, each with "cached only" (a donor).
    pub(crate) asks: Vec<(PeerRef, bool)>,
    /// Keep what peers send (false: hand it to the waiters without storing it).
    pub(crate) replica: bool,
    /// Set when the peer that answered owns the bytes (not a donor: this node does not own
    /// them), so what it sends is a replica here ([`BlockCache::keeps_replica`]).
    pub(crate) from_owner: bool,
    /// Never the origin (a hand-over pulls only what a peer holds).
    pub(crate) no_origin: bool,
    /// Told where the bytes came from, once the body began.
    pub(crate) report: Option<oneshot::Sender<Served>>,
    /// Counts the bytes the origin sends (the reader that started the fill reports them).
    pub(crate) tally: Option<Arc<AtomicU64>>,
}

impl Source {
    /// The origin only, its bytes counted in `tally`.
    pub(crate) fn origin(origin: &Arc<dyn OriginReader>, tally: Arc<AtomicU64>) -> Self {
        Self {
            origin: origin.clone(),
            fleet: None,
            asks: Vec::new(),
            replica: true,
            from_owner: false,
            no_origin: false,
            report: None,
            tally: Some(tally),
        }
    }

    /// Counts `n` bytes the origin sent.
    fn count(&self, n: usize) {
        if let Some(t) = &self.tally {
            t.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Bytes `start..end` of the target: from a peer that answers, else the origin.
    async fn open(
        &mut self,
        cache: &BlockCache,
        t: &Target,
        (start, end): (u64, u64),
    ) -> Result<(Box<dyn ByteStream>, bool), OriginError> {
        if let Some(fleet) = self.fleet.clone() {
            let mut asks = std::mem::take(&mut self.asks);
            let mut i = 0;
            while let Some((peer, cached_only)) = asks.get(i).cloned() {
                i += 1;
                let ask = BlockAsk {
                    bucket: t.bucket_key.clone(),
                    key: t.object_key.clone(),
                    etag: t.map.etag.clone(),
                    size: t.map.size,
                    block_bytes: cache.settings.block_bytes,
                    cached_only,
                    first: start,
                    last: end - 1,
                };
                match crate::asks::blocks(&*fleet, &peer, ask).await {
                    Ok(got) => {
                        self.from_owner = !cached_only;
                        self.tell(Served::Peer(got.source, got.node));
                        return Ok((got.body, true));
                    }
                    Err(PeerError::Conflict) => {
                        self.tell(Served::Origin);
                        return Err(OriginError::Changed);
                    }
                    // Bounded load: the next rendezvous choice fills instead (this node when
                    // it is that choice: the origin, below).
                    Err(PeerError::Busy) if !cached_only && i == 1 => {
                        let index = match t.map.class.immutable {
                            true => start / cache.settings.block_bytes,
                            false => 0, // one owner for a rewritable object
                        };
                        let next = fleet.next_owner(&t.bucket_key, &t.object_key, index, &peer);
                        asks.extend(next.map(|p| (p, false)));
                    }
                    Err(e) => {
                        tracing::debug!(peer = %peer.id, cached_only, error = %e, "peer did not answer: next source")
                    }
                }
            }
        }
        if self.no_origin {
            return Err(OriginError::Transport("the donor does not hold it".into()));
        }
        self.tell(Served::Origin);
        let body = t.read_origin(&*self.origin, (start, end - 1)).await?;
        Ok((body, false))
    }

    fn tell(&mut self, s: Served) {
        if let Some(r) = self.report.take() {
            let _ = r.send(s);
        }
    }
}

/// Fetches a run of adjacent block pieces with one ranged GET (If-Match on the ETag), from the
/// run's owner or the origin, storing and publishing each block the moment its piece is
/// complete. An owner that fails mid-body is replaced by the origin from the next byte on.
/// `tap` gets every chunk of the body, in order, from the first piece's first byte.
pub(crate) async fn fill(
    cache: Arc<BlockCache>,
    mut source: Source,
    t: Target,
    run: Vec<RunItem>,
    body: Option<Box<dyn ByteStream>>,
    mut tap: Option<mpsc::UnboundedSender<Bytes>>,
) {
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
    let got = match body {
        Some(b) => Ok((b, false)),
        None => source.open(&cache, &t, (start, end)).await,
    };
    let (mut body, mut from_peer) = match got {
        Ok(b) => b,
        Err(e) => return fail(to_fill_error(e), None, &mut items),
    };
    let mut pos = start;
    let mut cur = items.next();
    // One pooled buffer per block piece (with the held bytes around it: `crate::piece`), of
    // the piece's size class: the stores weigh a block by its buffers' capacity, so DRAM
    // ceilings hold in RSS too.
    let mut buf: Option<Piece> = None;
    while cur.is_some() {
        let mut chunk = match body.next().await {
            Ok(Some(c)) => c,
            Ok(None) if !from_peer => {
                let e = FillError::Failed("origin body ended early".into());
                return fail(e, cur, &mut items);
            }
            Err(e) if !from_peer || source.no_origin => {
                return fail(to_fill_error(e), cur, &mut items)
            }
            Ok(None) if source.no_origin => {
                let e = FillError::Failed("the donor's body ended early".into());
                return fail(e, cur, &mut items);
            }
            // The owner failed mid-body: the origin brings the rest, from the next byte.
            cut => {
                let why = cut
                    .err()
                    .map_or_else(|| "ended early".to_owned(), |e| e.to_string());
                tracing::debug!(key = &*t.object_key, at = pos, error = %why, "the owner's body failed: the origin brings the rest");
                from_peer = false;
                let got = t.read_origin(&*source.origin, (pos, end - 1)).await;
                match got {
                    Ok(b) => body = b,
                    Err(e) => return fail(to_fill_error(e), cur, &mut items),
                }
                continue;
            }
        };
        pos += chunk.len() as u64;
        if !from_peer {
            source.count(chunk.len());
        }
        // The tap gets the chunk after the blocks it completes are published, so a response
        // never ends before the fill has stored (and counted) what it served.
        let whole = chunk.clone();
        while !chunk.is_empty() {
            let Some(it) = cur.take() else { break };
            let mut piece = buf
                .take()
                .unwrap_or_else(|| Piece::start(it.from, it.to, it.held.as_ref()));
            let take = piece.room().min(chunk.len());
            piece.extend(&chunk.split_to(take));
            if piece.room() > 0 {
                buf = Some(piece);
                cur = Some(it);
                continue;
            }
            let how = Publish {
                object_size: size,
                from_peer,
                keep: !from_peer || source.replica,
                replica: from_peer && source.from_owner,
            };
            publish(&cache, &t, it, piece.finish(), how);
            cur = items.next();
        }
        if tap.as_ref().is_some_and(|t| t.send(whole).is_err()) {
            tap = None; // the client went away; the fill goes on for the cache
        }
    }
    // Drain to the end so the connection goes back to the pool.
    while let Ok(Some(rest)) = body.next().await {
        if !from_peer {
            source.count(rest.len());
        }
    }
}

/// How a fetched piece is published.
#[derive(Debug, Clone, Copy)]
struct Publish {
    /// The object's size.
    object_size: u64,
    /// A peer sent it (counted as peer bytes, not origin bytes).
    from_peer: bool,
    /// Store it (false: hand it to the waiters only, a replica this node does not keep).
    keep: bool,
    /// Its owner sent it: stored only if [`BlockCache::keeps_replica`] says so.
    replica: bool,
}

/// Merges a fetched piece (its bytes `it.from..it.to` and the held ones around them) into what
/// the block held, stores it (as `how` says) and hands it to the waiters.
fn publish(cache: &BlockCache, t: &Target, it: RunItem, piece: Span, how: Publish) {
    let Publish {
        object_size: size,
        from_peer: peer,
        keep,
        replica,
    } = how;
    let bs = cache.settings.block_bytes;
    let len = block_span(it.index, bs, size).1 as u32;
    let s = cache.store_of(t.map.class, (&t.bucket_key, &t.object_key), it.index, size);
    let fetched = u64::from(it.to - it.from);
    let block = match &it.held {
        Some(b) => b.merge(piece),
        None => Block::of(len, piece),
    };
    let stats = cache.pick(s, &t.bucket_key).1;
    let counter = if peer {
        &stats.peer_bytes
    } else {
        &stats.origin_bytes
    };
    counter.fetch_add(fetched, Ordering::Relaxed);
    if !keep || (replica && !cache.keeps_replica(&it.key, s, block.footprint())) {
        let _ = it.tx.send(Some(Ok(block)));
        cache.inflight.release(&it.key);
        return;
    }
    settle(cache, &it.key, s, block, &it.tx);
}

/// Stores a block (subject to admission), hands it to the claim's waiters and ends the claim.
fn settle(cache: &BlockCache, key: &BlockKey, s: Store, block: Block, tx: &watch::Sender<Slot>) {
    cache.admit(key.clone(), block.clone(), s);
    let _ = tx.send(Some(Ok(block)));
    cache.inflight.release(key);
}

pub(crate) fn to_fill_error(e: OriginError) -> FillError {
    match e {
        OriginError::Changed | OriginError::NotFound => FillError::Changed,
        other => FillError::Failed(other.to_string()),
    }
}

/// Object bytes `from..to` straight from the origin, not stored (for a read that kept finding
/// other fills of its block in the way).
pub(crate) async fn unshared(
    cache: &BlockCache,
    origin: &Arc<dyn OriginReader>,
    t: &Target,
    store: Store,
    (from, to): (u64, u64),
    tally: &AtomicU64,
) -> Result<Bytes, FillError> {
    let mut body = t
        .read_origin(&**origin, (from, to - 1))
        .await
        .map_err(to_fill_error)?;
    let mut buf = BufferPool::shared().take((to - from) as usize);
    while let Some(c) = body.next().await.map_err(to_fill_error)? {
        tally.fetch_add(c.len() as u64, Ordering::Relaxed);
        if buf.len() + c.len() > (to - from) as usize {
            return Err(FillError::Failed("origin body ran past the range".into()));
        }
        buf.extend_from_slice(&c);
    }
    if buf.len() as u64 != to - from {
        return Err(FillError::Failed("origin body ended early".into()));
    }
    cache
        .pick(store, &t.bucket_key)
        .1
        .origin_bytes
        .fetch_add(to - from, Ordering::Relaxed);
    Ok(buf.freeze())
}

/// Merges a piece fetched beside a fill into its block, under the block's claim (taken once
/// the fills in flight are done), so concurrent merges never drop each other's spans.
pub(crate) async fn store_piece(
    cache: Arc<BlockCache>,
    key: BlockKey,
    store: Store,
    len: u32,
    piece: Span,
) {
    loop {
        match cache.inflight.claim(&key) {
            Claim::Theirs(rx) => {
                let _ = inflight::wait(rx).await;
            }
            Claim::Mine(tx) => {
                let block = match cache.held(&key, store) {
                    Some(b) if b.spans() >= MAX_SPANS => b,
                    Some(b) => b.merge(piece),
                    None => Block::of(len, piece),
                };
                return settle(&cache, &key, store, block, &tx);
            }
        }
    }
}
