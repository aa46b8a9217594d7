//! Serving a read from the cache: open (resolve the version, plan the blocks, label the
//! response), then stream the blocks to a sink; the HTTP pieces of a client response.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::conditions::{Conditions, Verdict};
use floe_core::{ETag, ObjectKey, S3Error, S3ErrorCode};
use floe_filter::{CacheOutcome, FilterCtx};
use pingora::proxy::Session;

use crate::answer::not_modified_headers;
use crate::fill::Served;
use crate::filter::BlockFilter;
use crate::inflight::FillError;
use crate::mapping::Mapping;
use crate::range::{blocks_of, resolve, RangeAsk};
use crate::reader::{BlockReader, Plan};
use crate::resolve::{Probe, Resolution};
use crate::tap::{ServeError, Sink};

/// What a client read asks for: its Range header, HEAD or GET, its conditions, and the
/// version it names (`versionId`; `None`: the current version).
#[derive(Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) range: Option<&'a str>,
    pub(crate) head: bool,
    pub(crate) conditions: &'a Conditions,
    pub(crate) version: Option<&'a str>,
}

/// A read the cache will answer: the version, the status and byte range, and the reader that
/// serves it block by block.
pub(crate) struct Opened {
    pub(crate) map: Arc<Mapping>,
    pub(crate) status: u16,
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) reader: BlockReader,
    /// `hit`, `miss`, `partial`, `wait` (another read's fill brings the first bytes),
    /// `hit-peer` or `fill-peer` (see `trail.rs`).
    pub(crate) label: CacheOutcome,
    /// Origin bytes of the fills this response started before its header.
    pub(crate) origin_bytes: u64,
    /// The node that served (fleet only): the owner for `hit-peer` and `fill-peer`, else
    /// this node.
    pub(crate) node: Option<Arc<str>>,
    /// The response's first blocks, in hand before its headers are written.
    pub(crate) head: Held,
}

/// Bytes held for the response before its headers go out: one piece (a hit), or several,
/// and the first block not held (the stream goes on from there).
#[derive(Default)]
pub(crate) struct Held {
    one: Option<Bytes>,
    more: Vec<Bytes>,
    pub(crate) next: u64,
}

#[async_trait]
impl Sink for Held {
    async fn put(&mut self, bytes: Bytes) -> Result<(), ServeError> {
        match self.one {
            None if self.more.is_empty() => self.one = Some(bytes),
            _ => {
                self.more.extend(self.one.take());
                self.more.push(bytes);
            }
        }
        Ok(())
    }
}

impl Held {
    /// Writes what is held into `sink`.
    pub(crate) async fn drain(self, sink: &mut dyn Sink) -> Result<(), ServeError> {
        for b in self.one.into_iter().chain(self.more) {
            sink.put(b).await?;
        }
        Ok(())
    }
}

impl BlockFilter {
    /// Resolves the request's key, evaluates its `conditions` against the version held, and
    /// plans the read of `range` (the Range header): `Ok(None)` when the origin should answer
    /// instead (unknown key, multi-range, origin trouble). A 304 is an `Opened` of status 304
    /// (no body); a 412 is the error.
    pub(crate) async fn open(
        &self,
        ctx: &FilterCtx,
        ask: &Ask<'_>,
    ) -> Result<Option<Opened>, S3Error> {
        match self.open_once(ctx, ask).await? {
            // A named version cannot be resolved again to another one: the origin answers.
            Err(_) if ask.version.is_some() => Ok(None),
            // The owner could not honour the version this node knew, or the client's If-Match
            // names another version than the one held: resolve again, once.
            Err((key, etag)) => {
                self.map.mark_stale(key.as_str(), &etag);
                let again = self.open_once(ctx, ask).await?;
                Ok(again.ok().flatten())
            }
            Ok(o) => Ok(o),
        }
    }

    async fn open_once(&self, ctx: &FilterCtx, ask: &Ask<'_>) -> Reopen {
        let Ask {
            range,
            head,
            conditions,
            version,
        } = *ask;
        // A cold GET resolves with itself (one round trip); HEAD and multi-range reads with a
        // HEAD, and so do reads that may be answered 304 (no body to fetch for them).
        let probe = match head || conditions.may_not_modify() {
            true => Probe::Head,
            false => Probe::Get(range),
        };
        let resolved = match version {
            None => self.resolve(ctx, probe).await,
            Some(v) => self.resolve_version(ctx, v).await,
        };
        let Ok(Some(Resolution {
            map,
            known,
            adopted,
        })) = resolved
        else {
            return Ok(Ok(None));
        };
        let (Some(bucket), Some(key)) = (&ctx.bucket, &ctx.key) else {
            return Ok(Ok(None));
        };
        // Conditions before the range, as S3 evaluates them.
        match conditions.evaluate(map.etag.as_str(), map.last_modified) {
            Verdict::Proceed => {}
            // The client knows a version this node does not hold: the origin may have it.
            Verdict::PreconditionFailed { by_if_match: true } if known && version.is_none() => {
                return Ok(Err((key.clone(), map.etag.clone())));
            }
            Verdict::PreconditionFailed { .. } => {
                return Err(not_modified_headers(S3Error::precondition_failed(), &map));
            }
            Verdict::NotModified => {
                let reader = self.reader((bucket, key), &map, (0, 0), false);
                let label = if known {
                    CacheOutcome::Hit
                } else {
                    CacheOutcome::Miss
                };
                return Ok(Ok(Some(Opened::not_modified(map, reader, label))));
            }
        }
        let size = map.size;
        let (first, last, status) = match resolve(range, size) {
            RangeAsk::Multi => return Ok(Ok(None)),
            RangeAsk::Unsatisfiable => return Err(S3Error::invalid_range(size)),
            RangeAsk::Whole if size == 0 => (0, 0, 200),
            RangeAsk::Whole => (0, size - 1, 200),
            RangeAsk::Part { first, last } => (first, last, 206),
        };
        let mut reader = self.reader((bucket, key), &map, (first, last), false);
        if let Some(a) = adopted {
            reader.attach(a);
        }
        let plan = if head || size == 0 {
            Plan::default()
        } else {
            reader.plan().await
        };
        let mut opened = Opened {
            map,
            status,
            first,
            last,
            reader,
            label: if known {
                CacheOutcome::Hit
            } else {
                CacheOutcome::Miss
            },
            origin_bytes: 0,
            node: self.fleet.as_ref().map(|f| f.node_id().clone()),
            head: Held::default(),
        };
        if head || size == 0 {
            return Ok(Ok(Some(opened)));
        }
        let mut peer = None;
        match opened.reader.prime(&plan).await {
            Some(Err(FillError::Changed)) => {
                return Ok(Err((key.clone(), opened.map.etag.clone())))
            }
            Some(Ok(Served::Peer(source, node))) => {
                peer = Some(source);
                opened.node = Some(node);
            }
            _ => {}
        }
        if let Err(e) = self.hold_head(&mut opened, key).await {
            return e;
        }
        // The header tells where the first bytes came from and what the fills started for
        // them fetch from the origin (see `trail.rs`).
        opened.label = opened.reader.trail.label(&plan, peer);
        opened.origin_bytes = opened.reader.trail.claimed();
        Ok(Ok(Some(opened)))
    }
}

impl BlockFilter {
    /// Before the headers: an object whose name may be rewritten has its first block in hand
    /// (all of a response no longer than a block, which spans at most two), so a version that
    /// changed at the origin re-resolves (the caller retries) and other trouble is an error
    /// answer, never a body cut short after its headers. An immutable object's response
    /// begins once its first bytes are in. Then the first block not held is claimed, so the
    /// header can say where the bytes come from. `Err`: what `open_once` returns instead.
    async fn hold_head(&self, opened: &mut Opened, key: &ObjectKey) -> Result<(), Reopen> {
        let (first, last) = (opened.first, opened.last);
        let bs = self.cache.settings.block_bytes;
        let (b0, b1) = blocks_of(first, last, bs);
        let immutable = opened.map.class.immutable;
        let upto = if last - first < bs && !immutable {
            b1
        } else {
            b0
        };
        opened.head.next = b0;
        for i in b0..=upto {
            let held = match immutable {
                true => opened.reader.cut_through(i).await.map(|streams| !streams),
                false => Ok(true),
            };
            let served = match held {
                Ok(true) => opened.reader.serve(i, &mut opened.head).await,
                Ok(false) => break, // streams from block i after the header
                Err(e) => Err(e),
            };
            match served {
                Ok(()) => opened.head.next = i + 1,
                Err(ServeError::Fill(FillError::Changed)) => {
                    self.map.mark_stale(key.as_str(), &opened.map.etag);
                    return Err(Ok(Err((key.clone(), opened.map.etag.clone()))));
                }
                // An error answer, not the origin's: the bytes may be a staged write the
                // origin does not have yet, so passing could serve an older version.
                Err(e) => return Err(Err(S3Error::internal(e))),
            }
        }
        opened.reader.claim_ahead(opened.head.next).await;
        Ok(())
    }
}

/// What `open_once` answers: an opened read, `Ok(None)` for the origin, or the key and the
/// version to re-resolve past.
type Reopen = Result<Result<Option<Opened>, (ObjectKey, ETag)>, S3Error>;

impl Opened {
    /// A 304 for version `map`: headers only.
    fn not_modified(map: Arc<Mapping>, reader: BlockReader, label: CacheOutcome) -> Self {
        Self {
            map,
            status: 304,
            first: 0,
            last: 0,
            reader,
            label,
            origin_bytes: 0,
            node: None,
            head: Held::default(),
        }
    }
}

impl BlockFilter {
    /// Serves bytes `first..=last` through `reader` into `sink`, after the first blocks'
    /// `head` (held by [`Self::open`]). A version that changed under the read drops its mapping
    /// (the next read re-resolves); the error means the response must be cut short, never
    /// completed.
    pub(crate) async fn stream(
        &self,
        reader: &mut BlockReader,
        key: &ObjectKey,
        (first, last): (u64, u64),
        head: Held,
        sink: &mut dyn Sink,
    ) -> Result<(), S3Error> {
        let (b0, b1) = blocks_of(first, last, self.cache.settings.block_bytes);
        let next = head.next.max(b0);
        if let Err(e) = head.drain(sink).await {
            return Err(S3Error::internal(e));
        }
        for i in next..=b1 {
            if let Err(e) = reader.serve(i, sink).await {
                if e == ServeError::Fill(FillError::Changed) {
                    self.map.mark_stale(key.as_str(), &reader.target.map.etag);
                }
                tracing::warn!(key = key.as_str(), block = i, error = %e, "a block failed after the response began");
                return Err(S3Error::new(
                    S3ErrorCode::InternalError,
                    "We encountered an internal error. Please try again.",
                )
                .caused_by(e));
            }
        }
        Ok(())
    }
}

/// A response's body, written to the client as the reader produces it.
pub(crate) struct ClientSink<'a>(pub(crate) &'a mut Session);

#[async_trait]
impl Sink for ClientSink<'_> {
    async fn put(&mut self, bytes: Bytes) -> Result<(), ServeError> {
        self.0
            .write_response_body(Some(bytes), false)
            .await
            .map_err(|e| ServeError::Sink(e.to_string()))
    }
}

/// Holds one unit of a gauge until dropped.
pub(crate) struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    pub(crate) fn enter(g: &'a AtomicU64) -> Self {
        g.fetch_add(1, Ordering::Relaxed);
        Self(g)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
