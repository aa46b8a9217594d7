//! The `blocks` peer service: what other nodes' block caches ask of this one. Their asks for a
//! version and for bytes ([`crate::asks`]) are answered from this node's tiers (filling from
//! the origin once for every asker), hand-over lists from its recent blocks; their
//! [`Forget`]s are applied, and what a node back from away missed is listed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{
    HandOver, Pacer, Payload, PeerCall, PeerError, PeerRef, PeerReply, PeerRequest, PeerResponse,
    PeerService, Warmth,
};
use floe_core::ObjectKey;

use crate::asks::{Ask, BlockAsk, HeadDoc, PeerSource, HOT_LIST_MAX};
use crate::cache::BlockCache;
use crate::filter::BlockFilter;
use crate::forget::Forget;

/// The service.
pub(crate) struct BlocksService {
    pub cache: Arc<BlockCache>,
    pub routes: Arc<RwLock<HashMap<String, Arc<BlockFilter>>>>,
    /// Answers being filled from the origin right now.
    pub fills: Arc<AtomicUsize>,
    /// Above this many, an ask that would fill is refused as busy (the asker goes to the next
    /// rendezvous choice): the fleet's `max_owner_fills`.
    pub max_fills: usize,
}

/// Holds one unit of the fills gauge.
struct FillGuard(Arc<AtomicUsize>);

impl FillGuard {
    /// Takes a fill slot; none (the slot given back at once) when `max` were taken.
    fn take(fills: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let guard = Self(fills.clone());
        (fills.fetch_add(1, Ordering::Relaxed) < max).then_some(guard)
    }
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A failed ask's answer.
fn refused(e: &PeerError) -> PeerResponse {
    PeerResponse::whole(e.status(), Bytes::from(e.to_string()))
}

/// A body that holds a fill slot until it is read through (or dropped).
struct Holding {
    body: Box<dyn floe_core::ByteStream>,
    _slot: Option<FillGuard>,
}

#[async_trait]
impl floe_core::ByteStream for Holding {
    async fn next(&mut self) -> Result<Option<Bytes>, floe_core::OriginError> {
        self.body.next().await
    }
}

impl BlocksService {
    fn route(&self, bucket: &str) -> Option<Arc<BlockFilter>> {
        self.routes.read().ok()?.get(bucket).cloned()
    }

    async fn head(&self, bucket: &str, key: &str, stale: Option<&floe_core::ETag>) -> PeerResponse {
        let (Some(route), Ok(key)) = (self.route(bucket), ObjectKey::parse(key)) else {
            return refused(&PeerError::NotFound);
        };
        match route.answer_head(&key, stale).await {
            Ok(h) => match serde_json::to_vec(&HeadDoc::of(&h)) {
                Ok(doc) => PeerResponse::whole(200, Bytes::from(doc)),
                Err(e) => refused(&PeerError::Unavailable(e.to_string())),
            },
            Err(e) => refused(&e),
        }
    }

    fn hot(&self, bucket: &str, limit: usize) -> PeerResponse {
        let Some(route) = self.route(bucket) else {
            return refused(&PeerError::NotFound);
        };
        match serde_json::to_vec(&route.hot_list(limit.min(HOT_LIST_MAX))) {
            Ok(doc) => PeerResponse::whole(200, Bytes::from(doc)),
            Err(e) => refused(&PeerError::Unavailable(e.to_string())),
        }
    }

    async fn blocks(&self, mut ask: BlockAsk) -> PeerResponse {
        let (Some(route), Ok(key)) = (self.route(&ask.bucket), ObjectKey::parse(&ask.key)) else {
            return refused(&PeerError::NotFound);
        };
        // The fill slot is taken before the ask, not once its first bytes are ready (a whole
        // origin round trip later): asks arriving together must see each other's fills.
        let asked_cached = ask.cached_only;
        let slot = match asked_cached {
            true => None,
            false => FillGuard::take(&self.fills, self.max_fills),
        };
        ask.cached_only = slot.is_none();
        let got = match route.answer_blocks(&key, &ask).await {
            Ok(b) => b,
            // Refused a fill (no slot): busy, so the asker tries the next choice.
            Err(PeerError::NotFound) if !asked_cached => return refused(&PeerError::Busy),
            Err(e) => return refused(&e),
        };
        // A hit gives its slot back at once; a fill holds it until its body is sent.
        let slot = slot.filter(|_| got.source == PeerSource::Fill);
        PeerResponse {
            status: 200,
            note: got.source.note().to_owned(),
            node: got.node,
            body: Payload::streamed(
                ask.len(),
                Box::new(Holding {
                    body: got.body,
                    _slot: slot,
                }),
            ),
        }
    }
}

#[async_trait]
impl PeerService for BlocksService {
    async fn open(&self, request: PeerRequest) -> PeerResponse {
        match Ask::parse(request.method, &request.path) {
            Some(Ok(Ask::Head { bucket, key, stale })) => {
                self.head(&bucket, &key, stale.as_ref()).await
            }
            Some(Ok(Ask::Blocks(ask))) => self.blocks(ask).await,
            Some(Ok(Ask::Hot { bucket, limit })) => self.hot(&bucket, limit),
            Some(Err(why)) => refused(&PeerError::Refused(why.to_string())),
            None => {
                let body = match request
                    .body
                    .collect(floe_core::fleet::PEER_CALL_MAX_BYTES)
                    .await
                {
                    Ok(b) => b,
                    Err(e) => return refused(&PeerError::Refused(e.to_string())),
                };
                let call = PeerCall {
                    method: request.method,
                    path: request.path,
                    body,
                };
                let reply = self.call(call).await;
                PeerResponse::whole(reply.status, reply.body)
            }
        }
    }

    async fn call(&self, call: PeerCall) -> PeerReply {
        if let Some(since) = crate::missed::Missed::asked(&call) {
            let missed = self.cache.forgets.since(since);
            return PeerReply {
                status: 200,
                body: serde_json::to_vec(&missed).unwrap_or_default().into(),
            };
        }
        match Forget::decode(&call) {
            Ok(f) => {
                self.cache.forgets.record(&f);
                // The key changed at the origin: a staged write the fleet retired while this
                // node missed it must not be what the next read resolves to.
                f.apply_and_retire(&self.cache, &self.routes).await;
                PeerReply {
                    status: 204,
                    body: Bytes::new(),
                }
            }
            Err(why) => PeerReply {
                status: 400,
                body: why.to_string().into(),
            },
        }
    }
}

/// Takes over from a giver for every route, one after the other, at one pace.
#[async_trait]
impl Warmth for BlocksService {
    async fn take_over(&self, giver: &PeerRef, max_items: usize, pacer: &Pacer) -> HandOver {
        let routes: Vec<Arc<BlockFilter>> = match self.routes.read() {
            Ok(r) => r.values().cloned().collect(),
            Err(_) => return HandOver::default(),
        };
        let mut all = HandOver::default();
        for route in routes {
            let done = route.take_over(giver, max_items, pacer).await;
            all.items += done.items;
            all.bytes += done.bytes;
            all.failed += done.failed;
        }
        all
    }
}
