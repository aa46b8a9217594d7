//! A staged multipart upload seen from any node. Behind a load balancer a client's calls for
//! one upload land on several nodes, so each node keeps the parts it staged, and a node asked
//! about an upload it does not know learns it from the others:
//!
//! - UploadPart on any node: the upload (key, headers) is learnt from a peer if need be, and
//!   the part is kept where it was staged;
//! - ListParts, CompleteMultipartUpload and AbortMultipartUpload merge every active node's
//!   parts (for a part number staged twice, the later one);
//! - completion and abort make every node forget the upload.
//!
//! A part whose node is down at completion is missing from the merge: the completion then
//! fails (InvalidPart), never completes without it. Peer calls: `GET /upload?id=` answers the
//! upload as this node knows it (404 when it does not), `DELETE /upload?id=` forgets it.

use std::sync::Arc;

use bytes::Bytes;
use floe_core::fleet::PeerReply;
use floe_core::{S3Error, S3ErrorCode};
use serde::{Deserialize, Serialize};

use crate::journal::Record;
use crate::multipart::Upload;
use crate::node::Node;
use crate::wire::Call;

/// An upload as a node knows it, on the wire.
#[derive(Serialize, Deserialize)]
pub struct UploadDoc {
    #[serde(default)]
    bucket: String,
    key: String,
    headers: Vec<(String, String)>,
    parts: Vec<(u32, Record)>,
    #[serde(default)]
    started_ms: u64,
}

impl UploadDoc {
    fn into_upload(self) -> Upload {
        Upload {
            bucket: self.bucket,
            key: self.key,
            headers: self.headers,
            parts: self
                .parts
                .into_iter()
                .map(|(n, r)| (n, Arc::new(r)))
                .collect(),
            started_ms: self.started_ms,
        }
    }
}

fn no_such_upload() -> S3Error {
    S3Error::new(
        S3ErrorCode::NoSuchUpload,
        "The specified upload does not exist.",
    )
}

impl Node {
    /// Answers `Call::Upload`: this node's view of upload `id`.
    pub(crate) async fn serve_upload(self: &Arc<Self>, id: &str) -> PeerReply {
        let reply = |status, body: Vec<u8>| PeerReply {
            status,
            body: Bytes::from(body),
        };
        match self.uploads.get(id) {
            Some(up) => {
                let parts = up.parts.iter().map(|(n, r)| (*n, (**r).clone())).collect();
                let doc = UploadDoc {
                    bucket: up.bucket,
                    key: up.key,
                    headers: up.headers,
                    parts,
                    started_ms: up.started_ms,
                };
                reply(200, serde_json::to_vec(&doc).unwrap_or_default())
            }
            None => reply(404, b"no such upload".to_vec()),
        }
    }

    /// Answers `Call::DropUpload`: forgets upload `id` here.
    pub(crate) async fn serve_drop_upload(self: &Arc<Self>, id: &str) -> PeerReply {
        self.forget_here(id).await;
        PeerReply {
            status: 200,
            body: Bytes::new(),
        }
    }

    /// Every other active node's view of upload `id`.
    async fn peer_docs(self: &Arc<Self>, id: &str) -> Vec<UploadDoc> {
        let mut docs = Vec::new();
        for peer in self.others() {
            if let Ok(r) = self.ask(&peer, Call::Upload { id: id.to_owned() }).await {
                if let Ok(doc) = serde_json::from_slice::<UploadDoc>(&r.body) {
                    docs.push(doc);
                }
            }
        }
        docs
    }

    /// Makes sure this node knows upload `id` of `key` (learning it from a peer if need be).
    pub async fn learn_upload(self: &Arc<Self>, id: &str, key: &str) -> Result<(), S3Error> {
        if self.uploads.has(id, key) {
            return Ok(());
        }
        let doc = self.peer_docs(id).await.into_iter().find(|d| d.key == key);
        let doc = doc.ok_or_else(no_such_upload)?;
        self.uploads.adopt(id, doc.into_upload());
        Ok(())
    }

    /// Upload `id` of `key` with every active node's parts merged (for a part number staged
    /// on two nodes, the later one).
    pub async fn upload_view(self: &Arc<Self>, id: &str, key: &str) -> Result<Upload, S3Error> {
        let mut view = self.uploads.get(id).filter(|u| u.key == key);
        for doc in self
            .peer_docs(id)
            .await
            .into_iter()
            .filter(|d| d.key == key)
        {
            let theirs = doc.into_upload();
            let Some(v) = view.as_mut() else {
                view = Some(theirs);
                continue;
            };
            v.started_ms = v.started_ms.min(theirs.started_ms);
            if v.bucket.is_empty() {
                v.bucket = theirs.bucket;
            }
            for (n, r) in theirs.parts {
                if v.parts.get(&n).is_none_or(|old| old.acked_ms < r.acked_ms) {
                    v.parts.insert(n, r);
                }
            }
        }
        view.ok_or_else(no_such_upload)
    }

    /// Makes every active node forget upload `id` (its parts are the caller's to free).
    pub async fn forget_upload(self: &Arc<Self>, id: &str) {
        self.forget_here(id).await;
        for peer in self.others() {
            let _ = self
                .ask(&peer, Call::DropUpload { id: id.to_owned() })
                .await;
        }
    }

    /// Forgets upload `id` on this node (its files too, on a blocking thread).
    async fn forget_here(self: &Arc<Self>, id: &str) {
        let (me, id) = (self.clone(), id.to_owned());
        let _ = tokio::task::spawn_blocking(move || me.uploads.take(&id)).await;
    }

    /// `Call::HasJournal` of a part of an upload in progress here: 200, as for a journaled
    /// write (its fragments are not orphans); `None` otherwise (the store answers).
    pub(crate) fn serve_held_part(&self, id: &crate::id::ObjectId) -> Option<PeerReply> {
        self.uploads.holds(id).then(|| PeerReply {
            status: 200,
            body: Bytes::new(),
        })
    }
}
