//! Repair and scrub ("floe-writeback-repair"): for each staged write this node propagates, a
//! fragment whose node left the fleet, or (on the scrub schedule) whose shards fail their CRC,
//! is rebuilt stripe by stripe from k intact shards, re-encoded and placed on its own live node
//! again (when only corrupt) or on a live node holding none of the write's fragments. The
//! record then names the new placements, journaled and copied again.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{PeerCall, PeerRef};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::codec::{self, Encoder};
use crate::journal::{Placement, Record};
use crate::node::Node;
use crate::propagate::origin_of;
use crate::wire::Call;

/// What repair and scrub did (shown by `GET /writeback`).
#[derive(Debug, Default)]
pub struct RepairCounts {
    /// Fragments examined by a scrub.
    pub examined: AtomicU64,
    /// Fragments found corrupt or missing.
    pub bad: AtomicU64,
    /// Fragments rebuilt and placed again.
    pub repaired: AtomicU64,
    /// Orphan fragments removed (see [`crate::sweep`]).
    pub orphans: AtomicU64,
}

/// The repair and scrub worker.
pub struct Repairer {
    /// This node's write-back state.
    pub node: Arc<Node>,
    /// How often fragments' CRCs are all read and checked.
    pub scrub_every: Duration,
    /// How long a fragment's node may be gone before the fragment is rebuilt elsewhere.
    pub grace: Duration,
    /// How old an orphan fragment must be before a scrub removes it.
    pub orphan_after: Duration,
    /// Progress.
    pub counts: Arc<RepairCounts>,
    /// Origins by bucket (a copy is dropped only once the origin holds its write).
    pub origins: crate::propagate::Origins,
}

/// Finding and rebuilding bad fragments: the repair worker's own job, over this node's
/// store and fleet.
impl Repairer {
    /// Fragment indices of `r` that need rebuilding: no live node, or (when `scrub`) a shard
    /// failing its CRC or missing.
    async fn bad_fragments(
        &self,
        r: &Arc<Record>,
        scrub: bool,
        counts: &RepairCounts,
    ) -> BTreeSet<u8> {
        let g = r.geometry;
        let mut bad: BTreeSet<u8> = (0..g.width() as u8).collect();
        for p in &r.placements {
            let live = p.node == self.node.me() || self.node.fleet.member(&p.node).is_some();
            if live {
                bad.remove(&p.index);
            }
        }
        if !scrub {
            return bad;
        }
        for p in &r.placements {
            counts.examined.fetch_add(1, Ordering::Relaxed);
            // The header first: a fragment whose header lies (or fails its CRC) is not this
            // write's, whatever its shards say.
            // Only what was read and found wrong (or missing) is bad: a fragment that could not
            // be read now (a lost answer, a slow node) is looked at again next pass, never
            // dropped on a guess (dropping k good fragments so would lose the write).
            match self.header_of(r, p.index).await {
                Check::Good => {}
                Check::Bad => {
                    bad.insert(p.index);
                    continue;
                }
                Check::Unknown => continue,
            }
            for j in 0..g.stripes() {
                match self.shard_of(r, p.index, j).await {
                    Ok(s) if codec::verified(&g, j, &s).is_some() => {}
                    Ok(_) | Err(Check::Bad) => {
                        bad.insert(p.index);
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        bad
    }

    /// Rebuilds fragments `bad` of `r` and places them; the record with its new placements.
    async fn rebuild(&self, r: &Arc<Record>, bad: &BTreeSet<u8>) -> Option<Record> {
        let g = r.geometry;
        let holding: BTreeSet<String> = r
            .placements
            .iter()
            .filter(|p| !bad.contains(&p.index))
            .map(|p| p.node.clone())
            .collect();
        let mut spare = self
            .node
            .fleet
            .ranked(&r.id.to_string())
            .into_iter()
            .filter(|m| !holding.contains(&*m.id) && self.node.has_room(m, g.fragment_len()));
        let mut targets: Vec<(u8, PeerRef)> = Vec::new();
        for &i in bad {
            // A live node whose copy is only corrupt takes it again; else a spare node.
            let own = r
                .placements
                .iter()
                .find(|p| {
                    p.index == i
                        && (p.node == self.node.me() || self.node.fleet.member(&p.node).is_some())
                })
                .map(|p| self.node.peer_of(p));
            if let Some(t) = own.or_else(|| spare.next()) {
                targets.push((i, t));
            }
        }
        if targets.is_empty() {
            return None;
        }
        // The first stripe decodes from the fragments left before any copy is dropped: a
        // rebuild that cannot read them leaves every fragment where it is.
        let mut first = match g.stripes() {
            0 => None,
            _ => Some(self.node.stripe(r, 0).await.ok()?),
        };
        for (_, t) in &targets {
            let _ = self.node.call(t, drop_call(r, bad)).await;
        }
        let len = g.fragment_len();
        let mut offs = vec![0u64; targets.len()];
        let mut enc = Encoder::new(g);
        for j in 0..g.stripes() {
            let data = match first.take() {
                Some(data) => data,
                None => self.node.stripe(r, j).await.ok()?,
            };
            let shards =
                tokio::task::spawn_blocking(move || enc.encode(j, &data).map(|s| (enc, s)))
                    .await
                    .ok()?
                    .ok()?;
            enc = shards.0;
            for (n, (i, t)) in targets.iter().enumerate() {
                let shard = shards.1.get(usize::from(*i))?.clone();
                let piece: Bytes = if j == 0 {
                    [codec::header(&g, *i, r.id.bytes()), shard].concat().into()
                } else {
                    shard
                };
                let put = Call::PutFragment {
                    id: r.id,
                    idx: *i,
                    len,
                    off: offs[n],
                };
                let reply = self.node.call(t, put.with_body(piece.clone())).await.ok()?;
                if reply.status != 200 {
                    return None;
                }
                offs[n] += piece.len() as u64;
            }
        }
        if g.stripes() == 0 {
            for (i, t) in &targets {
                let put = Call::PutFragment {
                    id: r.id,
                    idx: *i,
                    len,
                    off: 0,
                };
                let body = codec::header(&g, *i, r.id.bytes());
                self.node.call(t, put.with_body(body)).await.ok()?;
            }
        }
        let mut next = (**r).clone();
        for (i, t) in &targets {
            let commit = Call::CommitFragment { id: r.id, idx: *i };
            let reply = self.node.call(t, commit.peer_call()).await.ok()?;
            if reply.status == 200 {
                next.placements.retain(|p| p.index != *i);
                next.placements.push(Placement {
                    index: *i,
                    node: t.id.to_string(),
                    addr: t.addr.to_string(),
                });
            }
        }
        next.placements.sort_by_key(|p| p.index);
        Some(next)
    }

    /// Whether fragment `index` of `r` has an intact header naming `r`'s geometry, id and
    /// this index (false when it cannot be read).
    async fn header_of(&self, r: &Record, index: u8) -> Check {
        let Some(p) = r.placements.iter().find(|p| p.index == index) else {
            return Check::Bad;
        };
        let call = Call::ReadFragment {
            id: r.id,
            idx: index,
            off: 0,
            len: codec::HEADER_LEN as u64,
        }
        .peer_call();
        let reply = match self.node.call(&self.node.peer_of(p), call).await {
            Ok(reply) if reply.status < 500 => reply,
            _ => return Check::Unknown,
        };
        match codec::parse_header(&reply.body) {
            Ok((geo, i, id))
                if reply.status == 200
                    && geo == r.geometry
                    && i == index
                    && id == *r.id.bytes() =>
            {
                Check::Good
            }
            _ => Check::Bad,
        }
    }

    /// Shard `j` of fragment `index` of `r` with its CRC; `Err(Bad)` when its node answered
    /// it has none, `Err(Unknown)` when the node could not be read.
    async fn shard_of(&self, r: &Record, index: u8, j: u64) -> Result<Bytes, Check> {
        let p = r.placements.iter().find(|p| p.index == index);
        let p = p.ok_or(Check::Bad)?;
        let g = &r.geometry;
        let read = Call::ReadFragment {
            id: r.id,
            idx: index,
            off: g.shard_offset(j),
            len: g.shard_len(j) + 4,
        };
        match self
            .node
            .call(&self.node.peer_of(p), read.peer_call())
            .await
        {
            Ok(reply) if reply.status == 200 => Ok(reply.body),
            Ok(reply) if reply.status < 500 => Err(Check::Bad),
            _ => Err(Check::Unknown),
        }
    }
}

/// What a look at a fragment found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Read and intact.
    Good,
    /// Read and wrong, or its node answered it has none.
    Bad,
    /// Its node could not be read now.
    Unknown,
}

/// Frees the fragments of `r` with indices in `bad` that a node may still hold.
fn drop_call(r: &Record, bad: &BTreeSet<u8>) -> PeerCall {
    Call::FreeFragments {
        id: r.id,
        idx: bad.iter().copied().collect(),
    }
    .peer_call()
}

/// How often a copy of another node's record is checked against its coordinator.
const COPY_CHECK: Duration = Duration::from_secs(5);

impl Repairer {
    /// Drops copies of records their coordinator no longer keeps (freed while this node was
    /// away); asks about each at most every [`COPY_CHECK`].
    pub(crate) async fn prune_copies(
        &self,
        checked: &mut std::collections::HashMap<crate::id::ObjectId, Instant>,
    ) {
        for r in self
            .node
            .staged
            .all()
            .into_iter()
            .filter(|r| !self.node.propagates(r))
        {
            if checked.get(&r.id).is_some_and(|t| t.elapsed() < COPY_CHECK) {
                continue;
            }
            checked.insert(r.id, Instant::now());
            let Some(owner) = self.node.fleet.member(&r.coordinator) else {
                continue;
            };
            let call = Call::HasJournal { id: r.id }.peer_call();
            let status = self.node.call(&owner, call).await.map_or(0, |r| r.status);
            if status == 410 {
                // Freed by its coordinator (propagated, overtaken or deleted) while this node
                // was away: never handed back, never served again.
                tracing::info!(id = %r.id, key = %r.key, "dropping a copy of a freed write");
                let (store, id) = (self.node.store.clone(), r.id);
                let _ = tokio::task::spawn_blocking(move || store.forget(&id)).await;
                self.node.unindex_id(&r.id, false);
                checked.remove(&r.id);
                continue;
            }
            if status != 404 {
                continue;
            }
            let origin = origin_of(&self.origins, &r.bucket);
            let Some(origin) = origin else { continue };
            if crate::propagate::at_origin(&*origin, &r).await {
                tracing::info!(id = %r.id, key = %r.key, "dropping a copy of a propagated write");
                let (store, id) = (self.node.store.clone(), r.id);
                let _ = tokio::task::spawn_blocking(move || store.forget(&id)).await;
                self.node.unindex_id(&r.id, true);
                checked.remove(&r.id);
            } else if crate::propagate::newer_at_origin(&*origin, &r).await {
                // A later write of the key reached the origin: this one lost, drop it.
                tracing::info!(id = %r.id, key = %r.key, "dropping a copy of a superseded write");
                let (store, id) = (self.node.store.clone(), r.id);
                let _ = tokio::task::spawn_blocking(move || store.forget(&id)).await;
                self.node.unindex_id(&r.id, false);
                checked.remove(&r.id);
            } else if let Ok(doc) = serde_json::to_vec(&*r) {
                // The coordinator lost it (its disk): it gets the record back, and propagates.
                tracing::warn!(id = %r.id, coordinator = %r.coordinator, "giving a coordinator back its lost record");
                let call = Call::KeepJournal.with_body(Bytes::from(doc));
                let _ = self.node.call(&owner, call).await;
            }
        }
    }

    pub(crate) async fn pass(
        &self,
        scrub: bool,
        gone_since: &mut std::collections::HashMap<crate::id::ObjectId, Instant>,
    ) {
        for r in self
            .node
            .staged
            .all()
            .into_iter()
            .filter(|r| self.node.propagates(r))
        {
            let bad = self.bad_fragments(&r, scrub, &self.counts).await;
            if bad.is_empty() {
                gone_since.remove(&r.id);
                continue;
            }
            let since = *gone_since.entry(r.id).or_insert_with(Instant::now);
            if !scrub && since.elapsed() < self.grace {
                continue;
            }
            self.counts
                .bad
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            let started = floe_core::spans::Started::now();
            let rebuilt = self.rebuild(&r, &bad).await;
            crate::metrics::background("repair", started, r.id);
            let Some(next) = rebuilt else {
                tracing::warn!(id = %r.id, ?bad, "fragments could not be rebuilt");
                continue;
            };
            self.counts
                .repaired
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            tracing::info!(id = %r.id, ?bad, "fragments rebuilt");
            gone_since.remove(&r.id);
            let store = self.node.store.clone();
            let rec = next.clone();
            let _ = tokio::task::spawn_blocking(move || store.journal.keep(&rec)).await;
            self.node.replicate(&next).await;
            self.node.index(Arc::new(next));
            tokio::task::yield_now().await;
        }
    }
}

#[async_trait]
impl BackgroundService for Repairer {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut gone_since = std::collections::HashMap::new();
        let mut checked = std::collections::HashMap::new();
        let mut next_scrub = Instant::now() + self.scrub_every;
        // Since when the node has been catching up (at start, or back from away).
        let mut behind_since: Option<Instant> = Some(Instant::now());
        loop {
            if !self.node.is_caught_up() {
                let since = *behind_since.get_or_insert_with(Instant::now);
                if self.node.catch_up(since.elapsed() >= self.grace).await {
                    behind_since = None;
                }
            }
            let scrub = Instant::now() >= next_scrub;
            if scrub {
                next_scrub = Instant::now() + self.scrub_every;
            }
            self.pass(scrub, &mut gone_since).await;
            self.prune_copies(&mut checked).await;
            if scrub {
                let n = self.sweep_orphans(self.orphan_after).await;
                self.counts.orphans.fetch_add(n, Ordering::Relaxed);
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1).min(self.scrub_every)) => {}
                _ = self.node.readiness.recatch() => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}
