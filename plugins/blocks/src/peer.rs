//! The owner's side of the fleet: other nodes' head and block asks answered from this node's
//! tiers, filling what it lacks from the origin through the same single-flight claims as client
//! reads (64 askers on 4 nodes make one origin GET). A reader answering a peer never asks
//! another peer.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{HandOver, Pacer, PeerError, PeerRef, Warmth};
use floe_core::{BucketName, ByteStream, ETag, ObjectHead, ObjectKey, OriginError};
use tokio::sync::mpsc;

use crate::asks::{BlockAsk, HotBlock, PeerBody, PeerSource, HOT_LIST_MAX};
use crate::filter::BlockFilter;
use crate::inflight::FillError;
use crate::mapping::Mapping;
use crate::range::blocks_of;
use crate::resolve::Probe;
use crate::store::BlockKey;
use crate::tap::{ServeError, Sink};

fn unavailable(e: impl std::fmt::Display) -> PeerError {
    PeerError::Unavailable(e.to_string())
}

/// The head an asker rebuilds its mapping from.
fn head_of(m: &Mapping) -> ObjectHead {
    let pairs = |l: &[(http::HeaderName, http::HeaderValue)]| -> Vec<(String, String)> {
        l.iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect()
    };
    ObjectHead {
        etag: m.etag.clone(),
        size: m.size,
        headers: pairs(&m.headers),
        checksums: m.checksums.as_deref().map(pairs),
    }
}

/// Takes over, from a giver, the hot blocks of this route that this node now owns.
#[async_trait]
impl Warmth for BlockFilter {
    async fn take_over(&self, giver: &PeerRef, max_items: usize, pacer: &Pacer) -> HandOver {
        let mut done = HandOver::default();
        let Some(fleet) = self.fleet.clone() else {
            return done;
        };
        let bucket = &*self.bucket_key;
        let list = match crate::asks::hot(&*fleet, giver, bucket, HOT_LIST_MAX).await {
            Ok(l) => l
                .into_iter()
                .filter(|b| self.owns_block(b))
                .take(max_items)
                .collect::<Vec<_>>(),
            Err(e) => {
                tracing::info!(from = %giver.id, bucket, error = %e, "no hand-over list");
                return done;
            }
        };
        tracing::info!(from = %giver.id, bucket, blocks = list.len(), "taking over warm blocks");
        for b in &list {
            pacer.ready().await;
            match self.pull_block(b, giver).await {
                Ok(n) => {
                    done.items += 1;
                    done.bytes += n;
                    pacer.spent(n).await;
                }
                Err(e) => {
                    done.failed += 1;
                    tracing::debug!(from = %giver.id, key = %b.key, error = %e, "hand-over pull failed");
                }
            }
        }
        done
    }
}

/// The owner's answers to other nodes' asks.
impl BlockFilter {
    /// The current version of `key`, as this node resolves it; a mapping naming `stale` is
    /// revalidated first.
    pub(crate) async fn answer_head(
        &self,
        key: &ObjectKey,
        stale: Option<&ETag>,
    ) -> Result<ObjectHead, PeerError> {
        let bucket = BucketName::parse(&self.bucket_key).map_err(unavailable)?;
        // An owner back from away answers no version before it heard what it missed.
        if let Some(c) = &self.catch_up {
            c.before_read().await;
        }
        if let Some(e) = stale {
            self.map.mark_stale(key.as_str(), e);
        }
        match self.resolve_key(&bucket, key, Probe::Local).await {
            Ok(Some(r)) => Ok(head_of(&r.map)),
            Ok(None) => Err(PeerError::NotFound),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// The bytes of `ask`, filling from the origin (once for every asker) what this node does
    /// not hold; `Ok` once the first of them is ready, so a version conflict is an error
    /// rather than a cut body. Never forwards to another peer.
    pub(crate) async fn answer_blocks(
        &self,
        key: &ObjectKey,
        ask: &BlockAsk,
    ) -> Result<PeerBody, PeerError> {
        if ask.block_bytes != self.cache.settings.block_bytes {
            return Err(PeerError::Refused(format!(
                "block size {} here, {} asked",
                self.cache.settings.block_bytes, ask.block_bytes
            )));
        }
        let bucket = BucketName::parse(&self.bucket_key).map_err(unavailable)?;
        let map = self.version(key, &ask.etag, ask.size);
        let mut reader = self
            .reader((&bucket, key), &map, (ask.first, ask.last), false)
            .answering_peer();
        let plan = reader.plan().await;
        if ask.cached_only && plan.missing_bytes > 0 {
            return Err(PeerError::NotFound);
        }
        let source = if plan.missing_bytes == 0 {
            PeerSource::Hit
        } else {
            PeerSource::Fill
        };
        let (tx, mut rx) = mpsc::channel(4);
        let (b0, b1) = blocks_of(ask.first, ask.last, self.cache.settings.block_bytes);
        // A peer's ask is a touch of its own beside the reader's: under pressure the owner
        // still admits what it fills for the fleet (it keeps the canonical copy).
        for i in b0..=b1 {
            let k = reader.target.block_key(i, self.cache.settings.block_bytes);
            self.cache.sketch.touch(k.stable_hash());
        }
        let (me, key, etag) = (self.clone(), key.clone(), ask.etag.clone());
        tokio::spawn(async move {
            let mut sink = ChannelSink(tx);
            for i in b0..=b1 {
                if let Err(e) = reader.serve(i, &mut sink).await {
                    if e == ServeError::Fill(FillError::Changed) {
                        me.map.mark_stale(key.as_str(), &etag);
                    }
                    let _ = sink
                        .0
                        .send(Err(OriginError::Transport(e.to_string())))
                        .await;
                    return;
                }
            }
        });
        // Answer only once the first bytes are in hand: a fill that fails before any (the
        // version changed at the origin, the origin is down) is an error the asker handles
        // before it answers its client, not a body cut short after its headers.
        let first = match rx.recv().await {
            Some(Ok(b)) => Some(b),
            Some(Err(e)) => return Err(unavailable(e)),
            None => None,
        };
        Ok(PeerBody {
            node: self
                .fleet
                .as_ref()
                .map_or_else(|| Arc::from(""), |f| f.node_id().clone()),
            source,
            body: Box::new(ChannelStream(first, rx)),
        })
    }
}

impl BlockFilter {
    /// Version `etag` (of `size` bytes) of `key`, whatever this node's mapping says: blocks are
    /// keyed by ETag and filled with If-Match on it, so they can only ever be its bytes.
    fn version(&self, key: &ObjectKey, etag: &ETag, size: u64) -> Arc<Mapping> {
        match self.map.get(key.as_str()) {
            Some(m) if m.etag == *etag && m.size == size => m,
            _ => Arc::new(Mapping {
                etag: etag.clone(),
                etag_key: Arc::from(etag.as_str()),
                etag_value: http::HeaderValue::from_str(etag.as_str()).ok(),
                size,
                headers: Vec::new(),
                checksums: None,
                last_modified: None,
                version_id: None,
                class: self.class_of(key.as_str()),
                checked: Instant::now(),
                stale: false,
            }),
        }
    }

    /// The hot blocks of this route in this node's block geometry.
    pub(crate) fn hot_list(&self, limit: usize) -> Vec<HotBlock> {
        if self.fleet.is_none() {
            return Vec::new();
        }
        let bs = self.cache.settings.block_bytes;
        self.cache
            .hot
            .collect(&self.bucket_key, limit, |k: &BlockKey| {
                u64::from(k.block_bytes) == bs
            })
            .into_iter()
            .map(|(k, size)| HotBlock {
                key: k.key.to_string(),
                etag: k.etag.to_string(),
                size,
                block_bytes: bs,
                index: k.index,
            })
            .collect()
    }

    /// Whether this node owns `b` in its view (`owner` is none for this node; a rewritable
    /// object has one owner for all its blocks: block 0's).
    fn owns_block(&self, b: &HotBlock) -> bool {
        let Some(fleet) = &self.fleet else {
            return false;
        };
        let placed = if self.class_of(&b.key).immutable {
            b.index
        } else {
            0
        };
        fleet.owner(&self.bucket_key, &b.key, placed).is_none()
    }

    /// Pulls one block from `from` (what it holds only) into this node's tiers.
    async fn pull_block(&self, b: &HotBlock, from: &PeerRef) -> Result<u64, PeerError> {
        let bs = self.cache.settings.block_bytes;
        let (Ok(bucket), Ok(key), Ok(etag)) = (
            BucketName::parse(&self.bucket_key),
            ObjectKey::parse(&b.key),
            ETag::parse(&b.etag),
        ) else {
            return Err(PeerError::Refused("malformed hot block".into()));
        };
        if b.block_bytes != bs || b.size == 0 || b.index * bs >= b.size {
            return Err(PeerError::Refused("another block geometry".into()));
        }
        let map = self.version(&key, &etag, b.size);
        let (first, last) = (b.index * bs, ((b.index + 1) * bs).min(b.size) - 1);
        let mut reader = self.reader((&bucket, &key), &map, (first, last), true);
        reader.only_from = Some(from.clone());
        reader
            .serve(b.index, &mut Discard)
            .await
            .map_err(|e| PeerError::Unavailable(e.to_string()))?;
        Ok(last + 1 - first)
    }
}

/// A sink that drops what it is given (a pull keeps the block in the tiers, not the bytes).
struct Discard;

#[async_trait]
impl Sink for Discard {
    async fn put(&mut self, _bytes: Bytes) -> Result<(), ServeError> {
        Ok(())
    }
}

/// Puts served bytes into the answer's channel.
struct ChannelSink(mpsc::Sender<Result<Bytes, OriginError>>);

#[async_trait]
impl Sink for ChannelSink {
    async fn put(&mut self, bytes: Bytes) -> Result<(), ServeError> {
        self.0
            .send(Ok(bytes))
            .await
            .map_err(|_| ServeError::Sink("the asker went away".into()))
    }
}

/// The answer's body: its first piece (already received), then the channel.
struct ChannelStream(Option<Bytes>, mpsc::Receiver<Result<Bytes, OriginError>>);

#[async_trait]
impl ByteStream for ChannelStream {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        if let Some(b) = self.0.take() {
            return Ok(Some(b));
        }
        self.1.recv().await.transpose()
    }
}
