//! The fleet seam: how a node's block cache finds the owner of a block and asks it, and how it
//! answers other nodes' asks. The `ring` plugin implements [`Fleet`] (membership, weighted
//! rendezvous owners, the peer API); the `blocks` plugin implements [`PeerServer`] and uses
//! [`Fleet`] on its miss path. One node without a fleet has neither.
//!
//! Ownership is placement, never consistency: blocks are keyed by ETag, so a copy served by any
//! node is as good as the owner's. The owner is where concurrent misses converge (one origin
//! fill per block fleet-wide), not the only place a block lives.
//!
//! ```
//! use floe_core::fleet::{BlockAsk, PeerError};
//! use floe_core::ETag;
//! let etag = ETag::parse("\"abc\"").unwrap();
//! let ask = BlockAsk { bucket: "wh", key: "t/data/a.parquet", etag: &etag, size: 10 << 20,
//!                      block_bytes: 1 << 20, cached_only: false, first: 0,
//!                      last: (1 << 20) - 1 };
//! assert_eq!(ask.len(), 1 << 20);
//! assert_eq!(PeerError::Conflict.status(), 412);
//! ```

use std::sync::Arc;

use async_trait::async_trait;

use crate::{ByteStream, ETag, ObjectHead, ObjectKey};

/// Another node of the fleet, as the view names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its stable node id (a StatefulSet pod name, or set in its config).
    pub id: Arc<str>,
    /// Its peer API address, `host:port`.
    pub addr: Arc<str>,
}

/// A handle on a peer, cheap to clone.
pub type PeerRef = Arc<Peer>;

/// One ask between nodes: bytes `first..=last` of version `etag` (of `size` bytes) of
/// (`bucket`, `key`), cached in blocks of `block_bytes`.
#[derive(Debug, Clone, Copy)]
pub struct BlockAsk<'a> {
    /// Bucket.
    pub bucket: &'a str,
    /// Object key.
    pub key: &'a str,
    /// The version the bytes must belong to (the owner fills with If-Match on it).
    pub etag: &'a ETag,
    /// The version's size.
    pub size: u64,
    /// The asker's block geometry; an owner with another one refuses.
    pub block_bytes: u64,
    /// Answer only from the peer's tiers (a donor ask): a miss there is `NotFound`, never an
    /// origin fill.
    pub cached_only: bool,
    /// First byte.
    pub first: u64,
    /// Last byte, inclusive.
    pub last: u64,
}

impl BlockAsk<'_> {
    /// Bytes asked for.
    pub fn len(&self) -> u64 {
        self.last + 1 - self.first
    }

    /// Never empty (`last` is inclusive).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// How the owner got the bytes it answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSource {
    /// All from its own tiers.
    Hit,
    /// Some or all filled from the origin for this ask (or joined a fill in flight).
    Fill,
}

/// The owner's answer to a [`BlockAsk`].
pub struct PeerBody {
    /// The node that answered.
    pub node: Arc<str>,
    /// How it got them.
    pub source: PeerSource,
    /// Exactly [`BlockAsk::len`] bytes; a short body is an error.
    pub body: Box<dyn ByteStream>,
}

/// Why a peer could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The owner cannot honour that ETag (the origin has another version): re-resolve.
    #[error("the owner has another version")]
    Conflict,
    /// The object does not exist.
    #[error("no such object")]
    NotFound,
    /// The owner uses another block size, or refused the ask as malformed.
    #[error("the owner refused the ask: {0}")]
    Refused(String),
    /// The owner has too many fills in flight: the next rendezvous choice serves.
    #[error("the owner is busy")]
    Busy,
    /// Down, slow, cut off, or any other transport or server fault: the asker goes to the
    /// origin itself.
    #[error("peer unavailable: {0}")]
    Unavailable(String),
}

impl PeerError {
    /// The peer API status for this error.
    pub fn status(&self) -> u16 {
        match self {
            PeerError::Conflict => 412,
            PeerError::NotFound => 404,
            PeerError::Refused(_) => 400,
            PeerError::Busy => 429,
            PeerError::Unavailable(_) => 503,
        }
    }
}

/// A node's place in the fleet, as its block cache uses it.
///
/// Contract: [`Fleet::owner`] is a pure function of the current membership view, cheap and
/// lock-free (it runs on the miss path); every node with the same view picks the same owner.
/// The ask methods never take longer than the fleet's peer timeout to fail, so a caller can
/// fall back to the origin and the client never sees a peer fault.
#[async_trait]
pub trait Fleet: Send + Sync {
    /// This node's id.
    fn node_id(&self) -> &Arc<str>;

    /// The owner of block `index` of (`bucket`, `key`): `None` when it is this node (or the
    /// fleet has no other live member).
    fn owner(&self, bucket: &str, key: &str, index: u64) -> Option<PeerRef>;

    /// The owner of block `index` when `busy` (its owner) refuses: the next rendezvous choice
    /// among the active members; `None` when that is this node. Default none.
    fn next_owner(
        &self,
        _bucket: &str,
        _key: &str,
        _index: u64,
        _busy: &PeerRef,
    ) -> Option<PeerRef> {
        None
    }

    /// For a block this node owns: peers that may still hold it, to ask in order (cached
    /// only) before the origin. The draining node that owned it (drain hands warmth over),
    /// and, during this node's warming window after it joined, the owner it took the block
    /// from. Default none.
    fn donors(&self, _bucket: &str, _key: &str, _index: u64) -> Vec<PeerRef> {
        Vec::new()
    }

    /// Asks `peer` for the current version of (`bucket`, `key`); `stale` names a version the
    /// asker found gone (or whose TTL ran out), which the owner revalidates rather than return.
    async fn head(
        &self,
        peer: &PeerRef,
        bucket: &str,
        key: &str,
        stale: Option<&ETag>,
    ) -> Result<ObjectHead, PeerError>;

    /// Asks `peer` for the bytes of `ask`; `Ok` once the peer's answer has begun.
    async fn blocks(&self, peer: &PeerRef, ask: &BlockAsk<'_>) -> Result<PeerBody, PeerError>;

    /// Registers the server that answers other nodes' asks for `bucket`.
    fn serve(&self, bucket: &str, server: Arc<dyn PeerServer>);

    /// Every active member, this node included, in rendezvous order over `name` (the first
    /// is the one `name` would be placed on, and so on). Default: none (no fleet).
    fn ranked(&self, _name: &str) -> Vec<PeerRef> {
        Vec::new()
    }

    /// A live member by id (active or draining). Default none.
    fn member(&self, _id: &str) -> Option<PeerRef> {
        None
    }

    /// Whether this node was told of peers to meet (seeds): until one answers, it may lack
    /// what the fleet did while it was away. A node told of none is a fleet of one. Default
    /// false.
    fn expects_peers(&self) -> bool {
        false
    }

    /// Every live member (active or draining) but this node: who must hear of a change every
    /// node's cache depends on (an object written through this node). Default none.
    fn others(&self) -> Vec<PeerRef> {
        Vec::new()
    }

    /// Sends `method path` (path and query, below the service) with `body` to the service
    /// `service` that `peer` mounted, over the fleet's authenticated transport, within
    /// `wait`. Default: refused (no fleet).
    async fn call(
        &self,
        _peer: &PeerRef,
        _service: &str,
        _call: PeerCall,
        _wait: std::time::Duration,
    ) -> Result<PeerReply, PeerError> {
        Err(PeerError::Refused("no fleet".into()))
    }

    /// Mounts `svc` as `service`: other nodes' [`Fleet::call`]s to this node reach it.
    /// Default: nothing (no fleet).
    fn mount(&self, _service: &str, _svc: Arc<dyn PeerService>) {}

    /// Publishes `value` under `key` in this node's gossiped state; every member sees it
    /// within a few gossip rounds (see [`Fleet::published`]). For small, slowly changing
    /// facts a plugin's peers choose by (e.g. write-back's free fragment bytes), not for
    /// per-request state: each change is a gossip update. Default: nothing (no fleet).
    async fn publish(&self, _key: &str, _value: String) {}

    /// What member `id` last published under `key`; `None` when it published nothing (or
    /// that has not reached this node yet). Lock-free. Default none.
    fn published(&self, _id: &str, _key: &str) -> Option<Arc<str>> {
        None
    }
}

/// A request one plugin sends to its own kind on another node.
#[derive(Debug, Clone)]
pub struct PeerCall {
    /// `GET`, `PUT`, `POST` or `DELETE`.
    pub method: &'static str,
    /// Path and query below the service, e.g. `/frag?id=..&idx=2`.
    pub path: String,
    /// The body (bounded by the transport: [`PEER_CALL_MAX_BYTES`]).
    pub body: bytes::Bytes,
}

/// Largest body of a [`PeerCall`] or [`PeerReply`]: 32 MiB.
pub const PEER_CALL_MAX_BYTES: usize = 32 << 20;

/// A service's answer to a [`PeerCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerReply {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: bytes::Bytes,
}

/// A plugin's endpoints on the peer API (see [`Fleet::mount`]).
///
/// Contract: the transport authenticated the caller as a fleet member; `call` must not block
/// the async thread.
#[async_trait]
pub trait PeerService: Send + Sync {
    /// Answers one call.
    async fn call(&self, call: PeerCall) -> PeerReply;
}

/// A block a node served recently, named for a hand-over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HotBlock {
    /// Object key.
    pub key: String,
    /// Version.
    pub etag: String,
    /// The version's size.
    pub size: u64,
    /// Block geometry.
    pub block_bytes: u64,
    /// Block index.
    pub index: u64,
}

/// Answers other nodes' asks for one bucket from this node's tiers, filling from the origin
/// (once for every asker) what it does not hold. Never forwards to another peer.
#[async_trait]
pub trait PeerServer: Send + Sync {
    /// The current version of `key`, as this node resolves it; a mapping naming `stale` is
    /// revalidated first.
    async fn head(&self, key: &ObjectKey, stale: Option<&ETag>) -> Result<ObjectHead, PeerError>;

    /// The bytes of `ask`; `Ok` once the first of them is ready, so a version conflict is an
    /// error rather than a cut body.
    async fn blocks(&self, key: &ObjectKey, ask: &BlockAsk<'_>) -> Result<PeerBody, PeerError>;

    /// Up to `limit` blocks this node served recently, most recent first (what a joining
    /// node, or the new owners of a draining node's blocks, choose from). Default none.
    fn hot(&self, _limit: usize) -> Vec<HotBlock> {
        Vec::new()
    }

    /// Whether `block` is this node's in its own view: of a giver's hot list, a hand-over
    /// pulls only those. The taker decides, not the giver: the view change that prompted the
    /// hand-over (the giver draining, this node joining) may not have reached the giver yet.
    /// Default false.
    fn takes(&self, _block: &HotBlock) -> bool {
        false
    }

    /// Fetches `block` from `from` (only what it holds, never the origin) and keeps it;
    /// returns the bytes pulled. Default: refused.
    async fn pull(&self, _block: &HotBlock, _from: &PeerRef) -> Result<u64, PeerError> {
        Err(PeerError::Refused("no hand-over here".into()))
    }
}
