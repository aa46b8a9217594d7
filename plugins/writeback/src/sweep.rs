//! Orphan fragments: kept fragments no journal names, left by a write whose coordinator died
//! before acknowledging it, or by a multipart upload aborted or completed while a node was
//! away. A scrub removes those older than `orphan_after_ms`, and only once every active node
//! answered that it keeps no record of the write (a journal record, or a part of an upload
//! in progress): a node that missed an acknowledged write's journal copy still holds a
//! fragment that counts. The same scrub aborts uploads left incomplete that long (as an S3
//! lifecycle rule AbortIncompleteMultipartUpload would), freeing their parts.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::id::ObjectId;
use crate::repair::Repairer;
use crate::wire::Call;

/// The orphan sweep: the repair worker's, on its scrub schedule.
impl Repairer {
    /// Removes the orphan fragments older than `older_than`; how many it removed.
    pub async fn sweep_orphans(&self, older_than: Duration) -> u64 {
        self.abort_stale_uploads(older_than).await;
        let store = self.node.store.clone();
        let listed = tokio::task::spawn_blocking(move || {
            let kept = store.fragments.list().unwrap_or_default();
            kept.into_iter()
                .filter(|(id, _, age)| *age >= older_than && !store.journal.has(id))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let listed: Vec<_> = listed
            .into_iter()
            .filter(|(id, _, _)| !self.node.uploads.holds(id))
            .collect();
        let mut by_id: BTreeMap<ObjectId, Vec<u8>> = BTreeMap::new();
        for (id, index, _) in listed {
            by_id.entry(id).or_default().push(index);
        }
        let mut removed = 0;
        for (id, indices) in by_id {
            if self.journaled_elsewhere(&id).await {
                continue;
            }
            tracing::info!(%id, ?indices, "removing orphan fragments");
            let store = self.node.store.clone();
            let n = indices.len() as u64;
            let gone = tokio::task::spawn_blocking(move || {
                indices
                    .iter()
                    .all(|i| store.fragments.remove(&id, *i).is_ok())
            })
            .await
            .unwrap_or(false);
            if gone {
                removed += n;
            }
        }
        removed
    }

    /// Aborts the uploads this node knows that started `older_than` ago: every node forgets
    /// them and their parts (wherever staged) are freed.
    async fn abort_stale_uploads(&self, older_than: Duration) {
        let before = crate::journal::now_ms().saturating_sub(older_than.as_millis() as u64);
        for id in self.node.uploads.started_before(before) {
            let Some(key) = self.node.uploads.get(&id).map(|u| u.key) else {
                continue;
            };
            let Ok(up) = self.node.upload_view(&id, &key).await else {
                continue;
            };
            tracing::info!(%id, key, parts = up.parts.len(), "aborting an upload left incomplete");
            self.node.forget_upload(&id).await;
            for p in up.parts.values() {
                self.node.free(p).await;
            }
        }
    }

    /// Whether another active node keeps a record of `id`, or could not say (then the
    /// fragment stays: removing it is safe only on every node's "no").
    async fn journaled_elsewhere(&self, id: &ObjectId) -> bool {
        for peer in self.node.others() {
            match self.node.ask(&peer, Call::HasJournal { id: *id }).await {
                Ok(r) if r.status == 404 => {}
                _ => return true,
            }
        }
        false
    }
}
