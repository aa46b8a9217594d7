//! The fleet seam, in three parts as pingora-load-balancing separates discovery, health and
//! selection: [`Membership`] (who is in the fleet, and what each member published),
//! [`Placement`] (which member owns a name) and [`Transport`] (authenticated calls to a
//! service another member mounted). The `ring` plugin implements all three as [`Fleet`]; a
//! plugin that talks to its own kind on other nodes (the block cache's asks, write-back's
//! fragments) mounts a [`PeerService`] and calls it through [`Transport`]. The seam knows no
//! plugin's messages: each plugin encodes its own calls. One node without a fleet has none.
//!
//! Ownership is placement, never consistency: blocks are keyed by ETag, so a copy served by any
//! node is as good as the owner's. The owner is where concurrent misses converge (one origin
//! fill per block fleet-wide), not the only place a block lives.
//!
//! ```
//! use floe_core::fleet::{Payload, PeerError};
//! let body = Payload::bytes(bytes::Bytes::from_static(b"abc"));
//! assert_eq!(body.len(), 3);
//! assert_eq!(PeerError::Conflict.status(), 412);
//! ```

mod call;
mod warmth;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use call::{
    Payload, PeerCall, PeerError, PeerReply, PeerRequest, PeerResponse, PeerService,
    PEER_CALL_MAX_BYTES,
};
pub use warmth::{HandOver, Pacer, Warmth};

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

/// Who is in the fleet.
///
/// Contract: every method is cheap and lock-free (they run on request paths).
#[async_trait]
pub trait Membership: Send + Sync {
    /// This node's id.
    fn node_id(&self) -> &Arc<str>;

    /// A live member by id (active or draining). Default none.
    fn member(&self, _id: &str) -> Option<PeerRef> {
        None
    }

    /// Every live member (active or draining) but this node: who must hear of a change every
    /// node's cache depends on (an object written through this node). Default none.
    fn others(&self) -> Vec<PeerRef> {
        Vec::new()
    }

    /// Whether this node was told of peers to meet (seeds): until one answers, it may lack
    /// what the fleet did while it was away. A node told of none is a fleet of one. Default
    /// false.
    fn expects_peers(&self) -> bool {
        false
    }

    /// Publishes `value` under `key` in this node's gossiped state; every member sees it
    /// within a few gossip rounds (see [`Membership::published`]). For small, slowly changing
    /// facts a plugin's peers choose by (e.g. write-back's free fragment bytes), not for
    /// per-request state: each change is a gossip update. Default: nothing (no fleet).
    async fn publish(&self, _key: &str, _value: String) {}

    /// What member `id` last published under `key`; `None` when it published nothing (or
    /// that has not reached this node yet). Lock-free. Default none.
    fn published(&self, _id: &str, _key: &str) -> Option<Arc<str>> {
        None
    }

    /// Registers `taker`: when ownership moves to this node (it joined, or a member began
    /// draining), the fleet's hand-over worker asks it to take over from each giver. Default:
    /// nothing (no fleet).
    fn take_over_with(&self, _taker: Arc<dyn Warmth>) {}
}

/// Which member owns a name: weighted rendezvous over the active members.
///
/// Contract: [`Placement::owner`] is a pure function of the current membership view, cheap
/// and lock-free (it runs on the miss path); every node with the same view picks the same
/// owner.
pub trait Placement: Send + Sync {
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

    /// Every active member, this node included, in rendezvous order over `name` (the first
    /// is the one `name` would be placed on, and so on). Default: none (no fleet).
    fn ranked(&self, _name: &str) -> Vec<PeerRef> {
        Vec::new()
    }

    /// How many asks an owner fills from the origin at once for other members; past it, an
    /// ask that would fill is refused as busy and goes to the next rendezvous choice (one hot
    /// owner cannot queue the fleet's misses behind its origin link). Default: no bound.
    fn max_owner_fills(&self) -> usize {
        usize::MAX
    }
}

/// Calls between members: each plugin's [`PeerService`] mounted under its name, reached over
/// the fleet's authenticated transport (the secret signs every request's head, and every piece
/// of every body in both directions, so a byte that did not come from a member is never handed
/// on).
///
/// Contract: a call never takes longer than its `wait` to begin answering (and each later
/// piece of a streamed body arrives within the fleet's gap timeout), so a caller can fall back
/// to the origin and its client never sees a peer fault.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Sends `request` to the service `service` that `peer` mounted; `Ok` once its answer
    /// began (status known, body streaming). Default: refused (no fleet).
    async fn open(
        &self,
        _peer: &PeerRef,
        _service: &str,
        _request: PeerRequest,
        _wait: Duration,
    ) -> Result<PeerResponse, PeerError> {
        Err(PeerError::Refused("no fleet".into()))
    }

    /// [`Transport::open`] for a small call: the whole answer read within `wait`, at most
    /// [`PEER_CALL_MAX_BYTES`] of it.
    async fn call(
        &self,
        peer: &PeerRef,
        service: &str,
        call: PeerCall,
        wait: Duration,
    ) -> Result<PeerReply, PeerError> {
        let work = async {
            let response = self.open(peer, service, call.into(), wait).await?;
            response.into_reply(PEER_CALL_MAX_BYTES).await
        };
        tokio::time::timeout(wait, work).await.map_err(|_| {
            PeerError::Unavailable(format!("{} did not answer in {wait:?}", peer.id))
        })?
    }

    /// How long a member takes at most to begin answering a call (the fleet's peer timeout):
    /// callers scale their waits from it. Default 1 s.
    fn peer_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Mounts `svc` as `service`: other nodes' calls to it on this node reach it (mounting
    /// again replaces it). Default: nothing (no fleet).
    fn mount(&self, _service: &str, _svc: Arc<dyn PeerService>) {}
}

/// A node's place in the fleet: membership, placement and transport together.
pub trait Fleet: Membership + Placement + Transport {}

impl<T: Membership + Placement + Transport + ?Sized> Fleet for T {}
