//! A request the origin takes itself (a DELETE, a copy, a direct PUT) first puts the key's
//! staged write at the origin ([`Node::flush_object`]). A node indexes a write when its
//! journal copy reaches it, and one may not have: a coordinator killed while copying its
//! record out reaches some nodes only (the write was never acknowledged, but the nodes it
//! reached indexed it, retired the write it overtook, and one of them takes its propagation
//! over). Passing such a write by, the request would be undone when it lands. So the node
//! first asks every other node for its staged writes of the key and takes in the ones it
//! missed (`Call::Staged`), then flushes as usual.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_core::fleet::PeerReply;

use crate::journal::Record;
use crate::node::Node;
use crate::wire::Call;

/// How long a request waits for one node's staged writes: a node that does not answer in
/// time (frozen, dying) is passed by, as a node away is (it catches up before it serves).
const STAGED_ASK: Duration = Duration::from_secs(2);

impl Node {
    /// Answers `Call::Staged`: the writes of `bucket` (of `key`, when given) indexed here; 503
    /// while this node has not caught up (what it indexes may be behind the fleet).
    pub(crate) fn serve_staged(&self, bucket: &str, key: Option<&str>) -> PeerReply {
        if !self.is_caught_up() {
            return PeerReply {
                status: 503,
                body: Bytes::from_static(b"catching up"),
            };
        }
        let records: Vec<Arc<Record>> = match key {
            Some(k) => self.staged.get(bucket, k).into_iter().collect(),
            None => self
                .staged
                .all()
                .into_iter()
                .filter(|r| r.bucket == bucket)
                .collect(),
        };
        let plain: Vec<&Record> = records.iter().map(|r| r.as_ref()).collect();
        match serde_json::to_vec(&plain) {
            Ok(doc) => PeerReply {
                status: 200,
                body: Bytes::from(doc),
            },
            Err(e) => PeerReply {
                status: 500,
                body: Bytes::from(e.to_string()),
            },
        }
    }

    /// Asks every other node for its staged writes of `bucket` (`key` only, when given) and
    /// keeps and indexes the ones this node missed (never one it freed); how many it took in.
    pub async fn learn_staged(self: &Arc<Self>, bucket: &str, key: Option<&str>) -> usize {
        let mut asks = tokio::task::JoinSet::new();
        for peer in self.others() {
            let me = self.clone();
            let call = Call::Staged {
                bucket: bucket.to_owned(),
                key: key.map(str::to_owned),
            };
            asks.spawn(async move {
                let reply = me
                    .call_within(&peer, call.peer_call(), STAGED_ASK)
                    .await
                    .ok()
                    .filter(|r| r.status == 200)?;
                serde_json::from_slice::<Vec<Record>>(&reply.body).ok()
            });
        }
        let mut seen = HashSet::new();
        let mut missed = Vec::new();
        while let Some(done) = asks.join_next().await {
            for r in done.ok().flatten().unwrap_or_default() {
                let known = self.staged.current(&r) || self.store.journal.is_freed(&r.id);
                if seen.insert(r.id) && !known {
                    missed.push(r);
                }
            }
        }
        // The usual case: nothing missed, and no trip to the blocking pool.
        if missed.is_empty() {
            return 0;
        }
        let store = self.store.clone();
        let kept = tokio::task::spawn_blocking(move || {
            missed
                .into_iter()
                .filter(|r| store.journal.has(&r.id) || store.journal.keep(r).is_ok())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut taken = 0;
        for r in kept {
            tracing::info!(id = %r.id, key = %r.key, coordinator = %r.coordinator, "a staged write this node missed");
            taken += usize::from(self.index(Arc::new(r)));
        }
        taken
    }
}
