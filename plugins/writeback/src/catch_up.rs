//! A node that was away (restarted, or new) missed the journal copies of writes acknowledged
//! meanwhile, and may hold copies of writes superseded meanwhile. So the copies it replays
//! wait (unserved) while its repair worker pulls every active peer's journal records
//! (`GET /journals`) and keeps a copy of each; then all are indexed together, and a later
//! write of a key displaces (and retires) an older copy: the node serves every acknowledged
//! write and never an older one. With no peer answering for the repair grace, the replayed
//! copies are indexed as they are (this node may be the one left to propagate them).
//! Until then the node is not ready (`/readyz` 503) and its reads of write-back routes wait
//! for the catch-up.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use floe_core::fleet::PeerReply;

use crate::id::ObjectId;
use crate::journal::Record;
use crate::node::Node;
use crate::wire::Call;

/// How long catch-up waits for one peer's journal and tombstones.
const CATCH_UP_ASK: std::time::Duration = std::time::Duration::from_secs(2);

impl Node {
    /// Answers `Call::Journals`: every journal record kept here.
    pub(crate) async fn serve_journals(self: &Arc<Self>) -> PeerReply {
        let store = self.store.clone();
        let records = tokio::task::spawn_blocking(move || store.journal.replay())
            .await
            .ok()
            .and_then(Result::ok);
        match records.and_then(|r| serde_json::to_vec(&r).ok()) {
            Some(doc) => PeerReply {
                status: 200,
                body: Bytes::from(doc),
            },
            None => PeerReply {
                status: 500,
                body: Bytes::from_static(b"journal unreadable"),
            },
        }
    }

    /// Pulls and keeps every active peer's records, then indexes them with the replayed
    /// copies; false while no peer answered (the worker tries again) unless `give_up`.
    pub async fn catch_up(self: &Arc<Self>, give_up: bool) -> bool {
        // The absences this pass covers: one after it starts needs another pass.
        let mark = floe_core::away::Away::global().mark();
        let others = self.others();
        // A node told of no peers has nobody to catch up with.
        let mut answered = others.is_empty() && !self.fleet.expects_peers();
        // Every peer at once, each within CATCH_UP_ASK: a paused or dying peer holds no pass
        // (any live peer's journal has every write acknowledged while this node was away).
        let mut asks = tokio::task::JoinSet::new();
        for peer in others {
            let me = self.clone();
            asks.spawn(async move {
                let ask = async {
                    let freed = me.ask(&peer, Call::Freed).await.ok()?;
                    let journals = me.ask(&peer, Call::Journals).await.ok()?;
                    (journals.status == 200).then_some(())?;
                    // A peer that keeps no tombstones yet (an older version) has none to give.
                    let freed = match freed.status {
                        200 => serde_json::from_slice::<Vec<ObjectId>>(&freed.body).ok()?,
                        _ => Vec::new(),
                    };
                    let records = serde_json::from_slice::<Vec<Record>>(&journals.body).ok()?;
                    Some((freed, records))
                };
                tokio::time::timeout(CATCH_UP_ASK, ask).await.ok().flatten()
            });
        }
        let (mut freed, mut records) = (HashSet::new(), Vec::new());
        while let Some(done) = asks.join_next().await {
            if let Ok(Some((ids, recs))) = done {
                answered = true;
                freed.extend(ids);
                records.extend(recs);
            }
        }
        // The writes some peer keeps a record of: acknowledged, or at least not orphaned here.
        let held: HashSet<ObjectId> = records.iter().map(|r| r.id).collect();
        let mut seen = HashSet::new();
        let fresh: Vec<Record> = records
            .into_iter()
            .filter(|r| !freed.contains(&r.id) && seen.insert(r.id))
            .collect();
        let store = self.store.clone();
        let kept = tokio::task::spawn_blocking(move || {
            fresh
                .into_iter()
                .filter(|r| store.journal.has(&r.id) || store.journal.keep(r).is_ok())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for rec in kept {
            self.index(Arc::new(rec));
        }
        // Back from a freeze: what the fleet freed meanwhile (propagated, deleted, overtaken)
        // and this node still indexes is dropped, so it neither serves nor propagates it.
        for r in self
            .staged
            .all()
            .into_iter()
            .filter(|r| freed.contains(&r.id))
        {
            tracing::info!(id = %r.id, key = %r.key, "dropping a write the fleet freed while this node was away");
            // Freed on every holder, not only here: the node that freed it may have died
            // before it reached them all.
            self.free(&r).await;
        }
        if answered {
            tracing::info!(
                records = seen.len(),
                "write-back journal caught up from peers"
            );
        }
        if answered || give_up {
            for r in self.take_replayed() {
                if freed.contains(&r.id) {
                    // Freed by the fleet while this node was away: dropped here too.
                    tracing::info!(id = %r.id, key = %r.key, "dropping a write the fleet freed while this node was away");
                    // This node may have been the one freeing it, and died partway (a holder
                    // it had not reached yet still serves it): finished now, on every holder.
                    self.free(&r).await;
                    continue;
                }
                if answered && !held.contains(&r.id) && self.lapsed(&r).await {
                    tracing::info!(id = %r.id, key = %r.key, "dropping a write never acknowledged (or freed) while this node was away");
                    self.free(&r).await;
                    continue;
                }
                self.index(r);
            }
            self.readiness.caught_up(mark);
            return true;
        }
        false
    }

    /// Whether a holder of `r` other than this node freed it (answers for its journal record
    /// 410: propagated, overtaken or deleted). Every holder is asked at once, each for at most
    /// [`crate::node::FREED_CHECK_WAIT`]: one that does not answer in time counts as not having freed it.
    pub async fn freed_elsewhere(self: &Arc<Self>, r: &Record) -> bool {
        let mut asks = self.ask_holders(r, crate::node::FREED_CHECK_WAIT);
        while let Some(answer) = asks.join_next().await {
            if answer.ok().flatten() == Some(410) {
                return true;
            }
        }
        false
    }

    /// Asks every holder of `r` other than this node, at once and each for at most `wait`,
    /// whether it keeps its journal record: each one's answer (200, 404, 410), `None` when it
    /// did not answer.
    fn ask_holders(
        self: &Arc<Self>,
        r: &Record,
        wait: std::time::Duration,
    ) -> tokio::task::JoinSet<Option<u16>> {
        let mut asks = tokio::task::JoinSet::new();
        for (peer, _) in self
            .holders(r)
            .into_iter()
            .filter(|(p, _)| *p.id != *self.me())
        {
            let (me, id) = (self.clone(), r.id);
            asks.spawn(async move {
                let call = Call::HasJournal { id }.peer_call();
                let answer = me.call_within(&peer, call, wait).await;
                answer.map(|a| a.status).ok()
            });
        }
        asks
    }

    /// Whether replayed write `r`, which no peer that answered the catch-up keeps, lapsed
    /// while this node was away: a node answers that it freed it, or every other node that
    /// may hold it answers that it holds no record of it. Its coordinator acknowledges it
    /// only once `r.copies` fragment nodes besides itself keep the record, so a record no
    /// other node holds was never acknowledged: a coordinator killed after journaling the
    /// write and before copying it out left it, and uploaded now it would land over the
    /// writes acknowledged since (or bring a deleted key back). Any copy elsewhere keeps it
    /// (the node holding it may have retired the write it overtakes), and so does a node
    /// that does not answer; a record from before the rule (`copies` 0) is never judged so.
    async fn lapsed(self: &Arc<Self>, r: &Record) -> bool {
        if r.copies == 0 {
            return false;
        }
        let mut asks = self.ask_holders(r, CATCH_UP_ASK);
        let mut held_nowhere = true;
        while let Some(answer) = asks.join_next().await {
            match answer.ok().flatten() {
                Some(410) => return true,
                Some(404) => {}
                _ => held_nowhere = false,
            }
        }
        held_nowhere
    }

    /// Whether the node caught up (it is not ready before: see [`Node::wait_caught_up`]).
    pub fn is_caught_up(&self) -> bool {
        self.readiness.is_caught_up()
    }

    /// Waits until the node caught up, at most `wait`: a read served before could answer an
    /// older version (or a 404) for a write acknowledged while this node was away. Catch-up
    /// ends within the repair grace whatever happens (it then gives up on absent peers).
    pub async fn wait_caught_up(&self, wait: std::time::Duration) -> bool {
        self.readiness.wait(wait).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragments::Fragments;
    use crate::journal::Journal;
    use crate::service::Store;
    use std::time::Duration;

    fn node(fleet: Arc<dyn floe_core::fleet::Fleet>) -> (tempfile::TempDir, Arc<Node>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(
            Arc::from("n"),
            Fragments::open(&dir.path().join("f"), 64 << 20).unwrap(),
            Journal::open(&dir.path().join("j")).unwrap(),
        );
        (
            dir,
            Arc::new(Node::new(Arc::new(store), fleet, Default::default())),
        )
    }

    /// A fleet that names seeds but whose members have not shown up yet.
    struct Seeded(Arc<str>);

    #[async_trait::async_trait]
    impl floe_core::fleet::Membership for Seeded {
        fn node_id(&self) -> &Arc<str> {
            &self.0
        }
        fn expects_peers(&self) -> bool {
            true
        }
    }

    impl floe_core::fleet::Placement for Seeded {
        fn owner(&self, _: &str, _: &str, _: u64) -> Option<floe_core::fleet::PeerRef> {
            None
        }
    }

    impl floe_core::fleet::Transport for Seeded {}

    #[tokio::test]
    async fn a_copy_read_before_its_free_is_never_indexed_after_it() {
        let (_dir, node) = node(Arc::new(crate::plugin::Alone(Arc::from("n"))));
        let r = crate::journal::sample("t/a.parquet", 10, "\"e\"", 1);
        node.store.journal.keep(&r).unwrap();
        // Replayed at start (or pulled from a peer while catching up): not indexed yet.
        node.replay(r.clone());
        // The fleet frees it meanwhile (propagated, overtaken or deleted).
        let write = Call::FreeWrite {
            id: r.id,
            at_origin: true,
        };
        assert_eq!(node.serve(write.peer_call()).await.status, 200);
        for copy in node.take_replayed() {
            assert!(!node.index(copy), "a freed write is not indexed again");
        }
        assert!(node.staged.get("b", "t/a.parquet").is_none());
        assert!(!node.index(Arc::new(r)), "nor is a copy pulled from a peer");
        assert!(node.staged.all().is_empty());
    }

    #[tokio::test]
    async fn a_repair_dropping_a_fragment_leaves_the_write_indexed_and_a_free_does_not() {
        let (_dir, node) = node(Arc::new(crate::plugin::Alone(Arc::from("n"))));
        let r = Arc::new(crate::journal::sample("t/a.parquet", 10, "\"e\"", 1));
        node.store.journal.keep(&r).unwrap();
        assert!(node.index(r.clone()));
        let free = Call::FreeFragments {
            id: r.id,
            idx: vec![0],
        };
        let dropped = node.serve(free.peer_call()).await;
        assert_eq!(dropped.status, 200);
        assert!(
            node.staged.current(&r),
            "a repair's fragment removal is not a free"
        );
        let write = Call::FreeWrite {
            id: r.id,
            at_origin: false,
        };
        let freed = node.serve(write.peer_call()).await;
        assert_eq!(freed.status, 200);
        assert!(!node.staged.current(&r));
    }

    #[tokio::test]
    async fn a_node_told_of_no_peers_is_caught_up_at_its_first_pass() {
        let (_dir, node) = node(Arc::new(crate::plugin::Alone(Arc::from("n"))));
        assert!(!node.is_caught_up());
        assert!(node.catch_up(false).await);
        assert!(node.is_caught_up());
        assert!(node.wait_caught_up(Duration::ZERO).await);
    }

    #[tokio::test]
    async fn a_node_expecting_peers_waits_for_one_or_for_its_grace() {
        let (_dir, node) = node(Arc::new(Seeded(Arc::from("n"))));
        assert!(!node.catch_up(false).await, "nobody answered yet");
        assert!(!node.is_caught_up());
        // A zero wait polls once: a request is held while the node is not caught up.
        assert!(!node.wait_caught_up(Duration::ZERO).await);
        let waiting = tokio::spawn({
            let node = node.clone();
            async move { node.wait_caught_up(Duration::from_secs(60)).await }
        });
        assert!(
            node.catch_up(true).await,
            "the grace is over: it gives up on absent peers"
        );
        assert_eq!(waiting.await.ok(), Some(true), "the held request goes on");
    }
}
