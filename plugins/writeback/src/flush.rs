//! Putting a staged write at the origin now, because a later write or delete of its key is
//! about to go to the origin itself: the older one must land first, and nothing may land after.
//!
//! Only the node that propagates a write ([`Node::propagates`]: its coordinator, or the node
//! that took over from a coordinator gone from the view) ever uploads it. A flush on any other
//! node asks that one (`POST /flush?id=I` on the write-back peer service), which flushes under
//! the same per-key lock as its propagator: an upload of the write under way there ends before
//! the flush answers, so no copy of it can reach the origin after the delete or write that
//! follows. (Two nodes uploading the same write, as before, let a late one land after a
//! DELETE: the acknowledged delete was undone, or the overwrite lost.)

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_core::fleet::PeerReply;
use floe_core::{S3Error, S3ErrorCode};

use crate::id::ObjectId;
use crate::journal::Record;
use crate::node::Node;
use crate::propagate::{at_origin, origin_of, upload};
use crate::wire::Call;

/// A flush under way on this node.
pub type Flushing<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// The longest a flush asked of another node is waited for (its upload included).
pub const FLUSH_WAIT: Duration = Duration::from_secs(60);

impl Node {
    /// Puts staged write `r` at the origin (here, or through the node that propagates it) and
    /// frees it; `Err` (SlowDown) when it cannot: the caller then refuses its request.
    pub async fn flush(self: &Arc<Self>, r: &Arc<Record>) -> Result<(), S3Error> {
        let here = self.propagates(r);
        let asked = match self.propagator_of(r).filter(|_| !here) {
            None => None,
            Some(peer) => {
                let call = Call::Flush { id: r.id }.peer_call();
                Some(self.call_within(&peer, call, FLUSH_WAIT).await)
            }
        };
        let outcome = match asked {
            None => self.flush_here(r).await,
            // At the origin (or overtaken) now. The propagating node freed it in its own view
            // of the fleet, which may be short of members right after it was frozen: this node
            // frees it too, so no member keeps serving it after the request that follows (a
            // DELETE would otherwise leave it readable on a member the other view missed).
            Some(Ok(reply)) if reply.status == 204 => {
                self.free_propagated(r).await;
                Ok(())
            }
            // The propagating node does not index the write (it missed its journal copy): it
            // cannot be uploading it either, so this node does.
            Some(Ok(reply)) if reply.status == 404 => self.flush_here(r).await,
            Some(Ok(reply)) => Err(String::from_utf8_lossy(&reply.body).into_owned()),
            Some(Err(e)) => Err(format!("the node that propagates it did not: {e}")),
        };
        outcome.map_err(|e| {
            S3Error::new(
                S3ErrorCode::SlowDown,
                format!("an earlier acknowledged write of this key is not at the origin yet: {e}"),
            )
        })
    }

    /// Flushes `r` on this node: under its upload lock (after an upload of it under way here
    /// ends); nothing to do if that upload put it at the origin or a newer write took it over.
    ///
    /// Boxed with a named type: a flush frees the write, freeing calls other nodes' peer
    /// service, and that service answers flushes (an opaque future could not name itself).
    pub(crate) fn flush_here<'a>(self: &'a Arc<Self>, r: &'a Arc<Record>) -> Flushing<'a> {
        Box::pin(async move {
            let origins = self.origins.get().ok_or("no origins yet")?;
            let origin = origin_of(origins, &r.bucket).ok_or("no origin for the route")?;
            let _held = self.uploading.lock(&r.bucket, &r.key).await;
            // Marked running before it looks, and no longer once it uploaded: its own free
            // below then waits for no one here (see `crate::uploading`).
            let running = self.uploading.running(r.id, &r.bucket, &r.key);
            if !self.staged.current(r) {
                return Ok(());
            }
            let uploaded = upload(self, &*origin, r).await;
            drop(running);
            if uploaded.is_ok() || at_origin(&*origin, r).await {
                self.free_propagated(r).await;
                return Ok(());
            }
            Err(uploaded.err().map(|e| e.to_string()).unwrap_or_default())
        })
    }

    /// The node that propagates `r` (see [`Node::propagates`]), when it is a live member.
    pub fn propagator_of(&self, r: &Record) -> Option<floe_core::fleet::PeerRef> {
        if let Some(p) = self.fleet.member(&r.coordinator) {
            return Some(p);
        }
        let mut by_index: Vec<&crate::journal::Placement> = r.placements.iter().collect();
        by_index.sort_by_key(|p| p.index);
        by_index
            .into_iter()
            .find_map(|p| self.fleet.member(&p.node))
    }

    /// Answers `Call::Flush`: 204 once the write is at the origin (or no longer staged), 404
    /// when this node does not index it, 503 when the origin did not take it.
    pub(crate) async fn serve_flush(self: &Arc<Self>, id: &ObjectId) -> PeerReply {
        let reply = |status: u16, body: String| PeerReply {
            status,
            body: Bytes::from(body),
        };
        let Some(r) = self.staged.all().into_iter().find(|r| r.id == *id) else {
            return reply(404, format!("{id} is not staged here"));
        };
        match self.flush_here(&r).await {
            Ok(()) => reply(204, String::new()),
            Err(e) => reply(503, e),
        }
    }
}
