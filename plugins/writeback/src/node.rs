//! This node's write-back state: its store, its fleet, the index of acknowledged writes not yet
//! at the origin (by bucket and key, the latest acknowledgment winning), and the way it calls
//! a fragment node (this node's own store directly, others over the peer API).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::fleet::{Fleet, PeerCall, PeerError, PeerRef, PeerReply, PeerService};
use floe_core::recent::{RecentMembers, DEPARTED_WAIT};
use floe_core::versions::Versions;
use tokio::sync::Notify;

use crate::journal::{Placement, Record};
use crate::service::{Store, SERVICE};
use crate::wire::Call;

/// How many times a journal copy or a free is sent to a live member before it is given up
/// (a member that misses one serves what the fleet moved past until it catches up).
pub const DELIVERY_ATTEMPTS: u32 = 3;

/// The pause before a delivery's next attempt, times the attempts so far.
const DELIVERY_PAUSE: Duration = Duration::from_millis(20);

/// The longest a write waits for its request to free the write it overtakes before it is
/// propagated anyway (a free is bounded by the fragment calls' wait).
pub const SETTLE_WAIT: Duration = Duration::from_secs(60);

/// How long one fragment call may take.
pub const CALL_WAIT: Duration = Duration::from_secs(10);
/// How long [`Node::freed_elsewhere`] waits for each holder: it runs before a forget is
/// confirmed, whose sender waits a second for it.
pub const FREED_CHECK_WAIT: Duration = Duration::from_millis(400);

/// A node's write-back state.
pub struct Node {
    /// Fragment store and journal.
    pub store: Arc<Store>,
    /// The fleet.
    pub fleet: Arc<dyn Fleet>,
    /// Staged writes by bucket, then key (see [`crate::index`]).
    pub(crate) staged: crate::index::Index,
    retired: std::sync::Mutex<Vec<Arc<Record>>>,
    /// Woken when a write is journaled (the propagator waits on it).
    pub journaled: Notify,
    /// Multipart uploads, with the parts staged on this node (see [`crate::fleet_uploads`]).
    pub uploads: crate::multipart::Uploads,
    /// Copies of other coordinators' records replayed at start, unserved until the node
    /// caught up with its peers (see [`crate::catch_up`]).
    replayed: std::sync::Mutex<Vec<Arc<Record>>>,
    /// The block cache's versions, when the node has one: a key's staged write and its
    /// propagation change the version it reads as (see [`floe_core::versions`]).
    pub versions: std::sync::OnceLock<Arc<dyn Versions>>,
    /// One upload of a write at a time (see [`crate::uploading`]).
    pub uploading: crate::uploading::Uploading,
    /// Whether it caught up with its peers' journals (see [`crate::readiness`]).
    pub(crate) readiness: crate::readiness::Readiness,
    /// The members seen live lately (see [`floe_core::recent`]).
    pub recent: RecentMembers,
    /// Origins by bucket, for a flush asked by another node (see [`crate::flush`]).
    pub origins: std::sync::OnceLock<crate::propagate::Origins>,
    /// Writes journaled whose request has not freed the write they overtake yet: not
    /// propagated before (see [`Node::settle`]), so an upload of the older one still under
    /// way elsewhere lands first.
    settling: std::sync::Mutex<std::collections::HashSet<crate::id::ObjectId>>,
}

impl Node {
    /// A node over `store` in `fleet`.
    pub fn new(
        store: Arc<Store>,
        fleet: Arc<dyn Fleet>,
        uploads: crate::multipart::Uploads,
    ) -> Self {
        Self {
            store,
            fleet,
            staged: crate::index::Index::default(),
            retired: std::sync::Mutex::default(),
            journaled: Notify::new(),
            uploads,
            replayed: std::sync::Mutex::default(),
            versions: std::sync::OnceLock::new(),
            uploading: crate::uploading::Uploading::default(),
            readiness: crate::readiness::Readiness::default(),
            recent: RecentMembers::default(),
            origins: std::sync::OnceLock::new(),
            settling: std::sync::Mutex::default(),
        }
    }

    /// Takes in a record replayed from the journal, served (and, for its coordinator,
    /// propagated) once the node caught up: the fleet may have freed it meanwhile (a DELETE
    /// while this node was away), and then it must never come back.
    pub fn replay(&self, r: Record) {
        if let Ok(mut q) = self.replayed.lock() {
            q.push(Arc::new(r));
        }
    }

    /// The replayed copies not indexed yet.
    pub fn take_replayed(&self) -> Vec<Arc<Record>> {
        self.replayed
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }

    /// Marks write `id` settling (`true`) or settled (`false`).
    pub(crate) fn set_settling(&self, id: crate::id::ObjectId, settling: bool) {
        if let Ok(mut s) = self.settling.lock() {
            match settling {
                true => s.insert(id),
                false => s.remove(&id),
            };
        }
    }

    /// Whether write `r` may be uploaded: not while its request still frees the write it
    /// overtakes, unless that has taken longer than [`SETTLE_WAIT`] (a request that died).
    pub fn settled(&self, r: &Record) -> bool {
        let settling = self.settling.lock().is_ok_and(|s| s.contains(&r.id));
        let age = crate::journal::now_ms().saturating_sub(r.acked_ms);
        !settling || age > SETTLE_WAIT.as_millis() as u64
    }

    /// This node's id.
    pub fn me(&self) -> &str {
        &self.fleet.node_id()[..]
    }

    /// The other active members.
    pub fn others(&self) -> Vec<PeerRef> {
        let mut v = self.fleet.ranked("");
        v.retain(|p| *p.id != *self.me());
        v
    }

    /// `GET`/`DELETE` `path` on `peer`'s store.
    pub async fn ask(self: &Arc<Self>, peer: &PeerRef, call: Call) -> Result<PeerReply, PeerError> {
        self.call(peer, call.peer_call()).await
    }

    /// Sends `call` to the store of `peer` (this node's own without the network).
    pub async fn call(
        self: &Arc<Self>,
        peer: &PeerRef,
        call: PeerCall,
    ) -> Result<PeerReply, PeerError> {
        if *peer.id == *self.me() {
            return Ok(self.serve(call).await);
        }
        self.fleet.call(peer, SERVICE, call, CALL_WAIT).await
    }

    /// Answers a call to this node's store: a journal copy is indexed (this node then serves
    /// reads of its key), a freed write unindexed.
    pub async fn serve(self: &Arc<Self>, call: PeerCall) -> PeerReply {
        let parsed = match Call::parse(call.method, &call.path) {
            Ok(c) => c,
            Err(e) => {
                return PeerReply {
                    status: 400,
                    body: e.to_string().into(),
                }
            }
        };
        match &parsed {
            Call::Upload { id } => return self.serve_upload(id).await,
            Call::DropUpload { id } => return self.serve_drop_upload(id).await,
            Call::Uploads { bucket } => return self.serve_open_uploads(bucket),
            Call::Staged { bucket, key } => return self.serve_staged(bucket, key.as_deref()),
            Call::Flush { id } => return self.serve_flush(id).await,
            Call::Journals => return self.serve_journals().await,
            Call::HasJournal { id } => {
                if let Some(reply) = self.serve_held_part(id) {
                    return reply;
                }
            }
            _ => {}
        }
        // A write freed because another overtook or deleted it: an upload of it under way
        // here ends first, so none lands at the origin after the write that follows.
        // (A write freed because the origin holds it takes no lock: its uploader frees it
        // while holding its own, and two uploaders of one key would wait on each other. It
        // waits below for an upload of that write here instead: see `crate::uploading`.)
        let _held = match self.superseded_here(&parsed) {
            Some((bucket, key)) => Some(self.uploading.lock(&bucket, &key).await),
            None => None,
        };
        let store = self.store.clone();
        let copy = matches!(parsed, Call::KeepJournal)
            .then(|| serde_json::from_slice::<Record>(&call.body).ok())
            .flatten();
        let freed = match parsed {
            Call::FreeWrite { id, at_origin } => Some((id, at_origin)),
            _ => None,
        };
        let body = call.body;
        let reply =
            match tokio::task::spawn_blocking(move || store.answer_call(&parsed, &body)).await {
                Ok(r) => r,
                Err(e) => PeerReply {
                    status: 500,
                    body: e.to_string().into(),
                },
            };
        if reply.status == 200 {
            if let Some(r) = copy {
                self.index(Arc::new(r));
            } else if let Some((id, at_origin)) = freed {
                // Only a freed write leaves the index (a repair dropping one fragment with
                // `FreeFragments` does not free the write).
                self.unindex_id(&id, at_origin);
                // Unindexed first: an upload that marks itself running and then finds the
                // write still current started before this, and is waited for; one that
                // looks after finds it gone and never starts.
                self.uploading.idle(&id).await;
            }
        }
        reply
    }

    /// The bucket and key of the write a `FreeWrite` frees because it was overtaken (not
    /// because the origin holds it), when this node indexes it or is uploading it (a newer
    /// write's copy may have displaced it from the index while its upload runs).
    fn superseded_here(&self, call: &Call) -> Option<(String, String)> {
        let Call::FreeWrite {
            id,
            at_origin: false,
        } = call
        else {
            return None;
        };
        match self.staged.all().into_iter().find(|r| r.id == *id) {
            Some(r) => Some((r.bucket.clone(), r.key.clone())),
            None => self.uploading.key_of(id),
        }
    }

    /// Drops write `id` from the index, whatever its key; `at_origin`: it was freed because the
    /// origin holds it (the key still reads as the same version, so the block cache keeps it).
    pub fn unindex_id(&self, id: &crate::id::ObjectId, at_origin: bool) {
        let gone = self.staged.remove_id(id);
        for (_, key) in &gone {
            tracing::debug!(%id, %key, at_origin, "unindexed");
        }
        for (bucket, key) in gone.iter().filter(|_| !at_origin) {
            self.forget_version(bucket, key);
        }
    }

    /// Makes the block cache forget what `bucket`/`key` resolved to: a staged write of it was
    /// indexed or dropped, so it now reads as another version.
    fn forget_version(&self, bucket: &str, key: &str) {
        if let Some(v) = self.versions.get() {
            v.forget(bucket, key);
        }
    }

    /// The node holding `p`, by id (its address as placed, if it left the view).
    pub fn peer_of(&self, p: &Placement) -> PeerRef {
        self.fleet.member(&p.node).unwrap_or_else(|| {
            Arc::new(floe_core::fleet::Peer {
                id: Arc::from(p.node.as_str()),
                addr: Arc::from(p.addr.as_str()),
            })
        })
    }

    /// Makes every node's block cache forget what `bucket`/`key` resolved to, and returns once
    /// told: a write this stage put at the origin before its answer (`sync`) replaced it.
    pub async fn forget_everywhere(&self, bucket: &str, key: &str) {
        if let Some(v) = self.versions.get() {
            v.forget_everywhere(bucket, key).await;
        }
    }

    /// Indexes `r` unless a later write of its key is indexed (then `r` is retired); a write
    /// it displaces is retired. True when `r` was indexed.
    pub fn index(&self, r: Arc<Record>) -> bool {
        // A write freed here is never indexed again: a copy read before the free (replayed at
        // start, or pulled from a peer's journal while catching up) and indexed after it would
        // be served after the write or DELETE that followed it.
        if self.store.journal.is_freed(&r.id) {
            tracing::debug!(id = %r.id, key = %r.key, "not indexed: freed here");
            return false;
        }
        let this = r.clone();
        let crate::index::Inserted { kept, displaced } = self.staged.insert(r);
        tracing::debug!(id = %this.id, key = %this.key, acked_ms = this.acked_ms, kept, displaced = ?displaced.as_ref().map(|d| d.id), "indexed");
        if let Some(old) = displaced {
            self.retire(old);
        }
        // Freed while it was inserted: the free tombstones before it unindexes, so either its
        // unindexing found this write or this look finds the tombstone.
        if kept && self.store.journal.is_freed(&this.id) {
            self.unindex_id(&this.id, false);
            return false;
        }
        if kept {
            self.forget_version(&this.bucket, &this.key);
        }
        kept
    }

    /// Drops `r` from the index (a DELETE or a newer write of its key went through this node)
    /// and retires it; true when it was indexed.
    pub fn unindex(&self, r: &Arc<Record>) -> bool {
        let removed = self.staged.remove(r);
        if removed {
            self.forget_version(&r.bucket, &r.key);
            self.retire(r.clone());
        }
        removed
    }

    /// Drops `r` (a DELETE or a newer write of its key came through this node) from the index
    /// and frees it on every node before the request goes on, so no node serves it after the
    /// answer. The queue's later free of it finds nothing left.
    pub async fn supersede(self: &Arc<Self>, r: &Arc<Record>) {
        if self.unindex(r) {
            self.free(r).await;
        }
    }

    /// Queues a superseded write to be freed everywhere (its journal records included, so no
    /// restart can replay it over the later write); the propagator frees it first thing.
    fn retire(&self, r: Arc<Record>) {
        if let Ok(mut q) = self.retired.lock() {
            q.push(r);
        }
        self.journaled.notify_one();
    }

    /// The superseded writes queued so far.
    pub fn take_retired(&self) -> Vec<Arc<Record>> {
        self.retired
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }

    /// The writes this node coordinates that are not at the origin yet: how many, their bytes,
    /// and the oldest one's age in ms.
    pub fn backlog(&self) -> (usize, u64, u64) {
        let now = crate::journal::now_ms();
        let mine: Vec<_> = self
            .staged
            .all()
            .into_iter()
            .filter(|r| r.coordinator == self.me())
            .collect();
        let bytes = mine.iter().map(|r| r.geometry.size).sum();
        let oldest = mine.first().map_or(0, |r| now.saturating_sub(r.acked_ms));
        (mine.len(), bytes, oldest)
    }

    /// The nodes that may hold a fragment or a journal copy of `r`: its fragment nodes and
    /// every active member, and the members that left the view lately, each with how long a
    /// message to it is waited for. Its coordinator is waited for as a fragment node is, even
    /// once out of this node's view: frozen mid-upload, it is the one node whose copy could
    /// still land at the origin (a node really gone refuses the call at once).
    pub fn holders(&self, r: &Record) -> Vec<(PeerRef, Duration)> {
        let mut out: Vec<(PeerRef, Duration)> = r
            .placements
            .iter()
            .map(|p| (self.peer_of(p), CALL_WAIT))
            .collect();
        let ranked = self.fleet.ranked(&r.id.to_string());
        // And the members that left the view lately (a node restarting serves reads before
        // every view lists it again: see floe_core::recent), waited for briefly.
        let seen = self.recent.with(ranked);
        let live = seen.live.into_iter().map(|m| (m, CALL_WAIT));
        let departed = seen.departed.into_iter().map(|m| {
            let wait = match *m.id == *r.coordinator {
                true => CALL_WAIT,
                false => DEPARTED_WAIT,
            };
            (m, wait)
        });
        for (m, wait) in live.chain(departed) {
            if !out.iter().any(|(p, _)| p.id == m.id) {
                out.push((m, wait));
            }
        }
        out
    }

    /// As [`Node::call`], waiting at most `wait`.
    pub async fn call_within(
        self: &Arc<Self>,
        peer: &PeerRef,
        call: PeerCall,
        wait: Duration,
    ) -> Result<PeerReply, PeerError> {
        if *peer.id == *self.me() {
            return Ok(self.serve(call).await);
        }
        self.fleet.call(peer, SERVICE, call, wait).await
    }

    /// As [`Node::call_within`], tried again (up to [`DELIVERY_ATTEMPTS`] in all, all within
    /// `wait`) while the call fails and `peer` is still a live member: for the calls whose
    /// loss would leave a live node serving what the fleet moved past (a journal copy, a
    /// free). The call must be idempotent (its answer may be lost after it was served).
    pub async fn deliver(
        self: &Arc<Self>,
        peer: &PeerRef,
        call: PeerCall,
        wait: Duration,
    ) -> Result<PeerReply, PeerError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut attempt = 1;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let done = self.call_within(peer, call.clone(), left).await;
            let pause = DELIVERY_PAUSE * attempt;
            let again = match &done {
                Ok(reply) => reply.status >= 500,
                Err(_) => true,
            };
            if !again
                || attempt >= DELIVERY_ATTEMPTS
                || left <= pause
                || self.fleet.member(&peer.id).is_none()
            {
                return done;
            }
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    /// Whether this node propagates `r`: its coordinator does; while the coordinator is not
    /// live, the first live node holding one of its fragments (by index) takes it over. Two
    /// nodes uploading the same bytes at once is harmless; none uploading would not be.
    pub fn propagates(&self, r: &Record) -> bool {
        let me = self.me();
        if r.coordinator == me {
            return true;
        }
        if self.fleet.member(&r.coordinator).is_some() {
            return false;
        }
        let mut by_index: Vec<&Placement> = r.placements.iter().collect();
        by_index.sort_by_key(|p| p.index);
        by_index
            .into_iter()
            .find(|p| p.node == me || self.fleet.member(&p.node).is_some())
            .is_some_and(|p| p.node == me)
    }

    /// Frees the fragments and journal copies of `r` on every node that may hold one (best
    /// effort: a node that is down keeps its copy; on its return it propagates the same bytes
    /// again or finds the record superseded).
    pub async fn free(self: &Arc<Self>, r: &Record) {
        self.free_as(r, false).await;
    }

    /// As [`Node::free`], for a write the origin confirmed: the key reads as the same
    /// version from the origin now, so no node's block cache forgets it.
    pub async fn free_propagated(self: &Arc<Self>, r: &Record) {
        self.free_as(r, true).await;
    }

    async fn free_as(self: &Arc<Self>, r: &Record, at_origin: bool) {
        let mut set = tokio::task::JoinSet::new();
        for (peer, wait) in self
            .holders(r)
            .into_iter()
            .filter(|(p, _)| *p.id != *self.me())
        {
            let (me, id) = (self.clone(), r.id);
            set.spawn(async move {
                let call = Call::FreeWrite { id, at_origin }.peer_call();
                if let Err(e) = me.deliver(&peer, call, wait).await {
                    tracing::info!(%id, node = %peer.id, error = %e, "freeing a fragment failed");
                }
            });
        }
        while set.join_next().await.is_some() {}
        // Overtaken: an upload of it under way here ends first (see `serve`).
        let _held = match at_origin {
            true => None,
            false => self.uploading.lock(&r.bucket, &r.key).await,
        };
        let (store, id) = (self.store.clone(), r.id);
        let _ = tokio::task::spawn_blocking(move || store.forget(&id)).await;
        self.unindex_id(&id, at_origin);
    }
}

/// The peer-API face of a node's store.
pub struct NodeService(pub Arc<Node>);

#[async_trait]
impl PeerService for NodeService {
    async fn call(&self, call: PeerCall) -> PeerReply {
        self.0.serve(call).await
    }
}
