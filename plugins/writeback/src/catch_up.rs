//! A node that was away (restarted, or new) missed the journal copies of writes acknowledged
//! meanwhile, and may hold copies of writes superseded meanwhile. So the copies it replays
//! wait (unserved) while its repair worker pulls every active peer's journal records
//! (`GET /journals`) and keeps a copy of each; then all are indexed together, and a later
//! write of a key displaces (and retires) an older copy: the node serves every acknowledged
//! write and never an older one. With no peer answering for the repair grace, the replayed
//! copies are indexed as they are (this node may be the one left to propagate them).

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use floe_core::fleet::PeerReply;

use crate::journal::Record;
use crate::node::Node;

impl Node {
    /// Answers `GET /journals`: every journal record kept here (`None` for other calls).
    pub(crate) async fn serve_journals(
        self: &Arc<Self>,
        method: &str,
        path: &str,
    ) -> Option<PeerReply> {
        if (method, path) != ("GET", "/journals") {
            return None;
        }
        let store = self.store.clone();
        let records = tokio::task::spawn_blocking(move || store.journal.replay())
            .await
            .ok()
            .and_then(Result::ok);
        Some(match records.and_then(|r| serde_json::to_vec(&r).ok()) {
            Some(doc) => PeerReply {
                status: 200,
                body: Bytes::from(doc),
            },
            None => PeerReply {
                status: 500,
                body: Bytes::from_static(b"journal unreadable"),
            },
        })
    }

    /// Pulls and keeps every active peer's records, then indexes them with the replayed
    /// copies; false while no peer answered (the worker tries again) unless `give_up`.
    pub async fn catch_up(self: &Arc<Self>, give_up: bool) -> bool {
        let others = self.others();
        let mut answered = false;
        let mut seen = HashSet::new();
        for peer in others {
            let Ok(r) = self.ask(&peer, "GET", "/journals".into()).await else {
                continue;
            };
            let Ok(records) = serde_json::from_slice::<Vec<Record>>(&r.body) else {
                continue;
            };
            answered |= r.status == 200;
            let fresh: Vec<Record> = records.into_iter().filter(|r| seen.insert(r.id)).collect();
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
        }
        if answered {
            tracing::info!(
                records = seen.len(),
                "write-back journal caught up from peers"
            );
        }
        if answered || give_up {
            for r in self.take_replayed() {
                self.index(r);
            }
            return true;
        }
        false
    }
}
