//! The coordinator: a PUT's body is encoded one stripe at a time (memory bounded by the stripe
//! whatever the object size) and each fragment streamed to its own node, in rendezvous order
//! over the write's id. At the w-th fsync report the journal record is fsynced, and only then
//! is the write acknowledged (the types make that the only way: see [`crate::journal`]).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use floe_core::fleet::{PeerError, PeerRef, PeerReply};
use floe_core::spans::{Phase, Started};
use floe_core::{S3Error, S3ErrorCode};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};

use crate::codec::{self, Encoder, Geometry};
use crate::config::RouteOptions;
use crate::fragments::FsyncReport;
use crate::id::ObjectId;
use crate::journal::{Acked, Placement, Quorum, Record};
use crate::node::Node;
use crate::wire::Call;

/// Pieces of one fragment sent at once: a node writes each at its offset, so the round trips
/// of a fragment's pieces overlap rather than add up.
const PIECES_IN_FLIGHT: usize = 4;

/// A request body as the coordinator reads it.
#[async_trait]
pub trait BodySource: Send {
    /// The next piece; `Ok(None)` at the end.
    async fn next(&mut self) -> Result<Option<Bytes>, S3Error>;
}

/// What became of a PUT.
#[derive(Debug)]
pub enum Outcome {
    /// Durable across the fleet and journaled: answer 200 (`x-floe-writeback: staged`).
    Staged(Box<Acked>),
    /// Fewer than w fragments were durable but at least k: nothing is acknowledged until the
    /// caller wrote the object (rebuilt from them) to the origin (`x-floe-writeback: sync`),
    /// then freed the fragments.
    NeedsSync(Box<Record>),
    /// Journaled and copied out, but its record reached fewer nodes than an acknowledgment
    /// needs: a 503 SlowDown (the write may or may not take effect, as with any 5xx). It
    /// carries on as a staged write all the same: a node its copy reached (even one whose
    /// answer was lost) indexed it and retired the write it overtakes.
    Unconfirmed(Box<Acked>, String),
}

/// A write's placement, decided before its body is read.
pub struct Plan {
    id: ObjectId,
    geo: Geometry,
    targets: Vec<PeerRef>,
    w: usize,
}

/// What the coordinator writes: the object's identity and stored headers.
pub struct Object<'a> {
    /// Bucket.
    pub bucket: &'a str,
    /// Key.
    pub key: &'a str,
    /// Headers kept with the object.
    pub headers: Vec<(String, String)>,
    /// What the client said the body hashes to: checked before any ack.
    pub expected: crate::digests::Expected,
    /// The parts the body is made of, in order (none: a PutObject). The write's ETag is then
    /// S3's multipart ETag of them, not the MD5 of the body.
    pub parts: Vec<crate::journal::Part>,
}

/// The coordinator of this node's writes: plans a PUT, streams its fragments, counts the
/// fsync reports and journals the write. It owns no state of its own: it works on its node's
/// store, fleet and index (see [`Node::coordinator`]).
#[derive(Clone)]
pub struct Coordinator {
    node: Arc<Node>,
}

impl Node {
    /// The coordinator of writes through this node.
    pub fn coordinator(self: &Arc<Self>) -> Coordinator {
        Coordinator { node: self.clone() }
    }

    /// Copies `r` to every other node (at once): the fragment nodes keep it so losing this
    /// node's disk loses nothing, and every node indexes it so a read of its key through any
    /// node serves it. A record is a few hundred bytes. The number of fragment nodes besides
    /// this one that kept it: a coordinator acknowledges the write only once `r.copies` did.
    pub async fn replicate(self: &Arc<Self>, r: &Record) -> usize {
        let Ok(doc) = serde_json::to_vec(r) else {
            return 0;
        };
        let doc = Bytes::from(doc);
        let mut set = JoinSet::new();
        for (peer, wait) in self
            .holders(r)
            .into_iter()
            .filter(|(p, _)| *p.id != *self.me())
        {
            let (me, body) = (self.clone(), doc.clone());
            let placed = r.placements.iter().any(|p| *p.node == *peer.id);
            set.spawn(async move {
                let call = Call::KeepJournal.with_body(body);
                match me.deliver(&peer, call, wait).await {
                    Ok(reply) if reply.status == 200 => placed,
                    Ok(reply) => {
                        tracing::info!(node = %peer.id, status = reply.status, "journal copy refused");
                        false
                    }
                    Err(e) => {
                        tracing::info!(node = %peer.id, error = %e, "journal copy failed");
                        false
                    }
                }
            });
        }
        let mut kept = 0;
        while let Some(done) = set.join_next().await {
            kept += usize::from(done.unwrap_or(false));
        }
        kept
    }
}

impl Coordinator {
    /// The order stamp of a new write of `bucket`/`key` (last acknowledged write wins): the
    /// wall clock, but always past the write of the key this node indexes. Every node indexes
    /// each acknowledged write as its record is copied out, so a write that follows another's
    /// acknowledgment orders after it even when its coordinator's clock is behind (a hybrid
    /// logical clock, per key); concurrent writes order by stamp, then id, on every node.
    pub fn stamp(&self, bucket: &str, key: &str) -> u64 {
        let now = crate::journal::now_ms();
        self.node
            .staged
            .get(bucket, key)
            .map_or(now, |r| now.max(r.acked_ms.saturating_add(1)))
    }

    /// Where a write of `size` bytes would go, or `None` when fewer than w nodes are eligible
    /// (the PUT then goes straight to the origin): the first k + m nodes in rendezvous order
    /// that advertise room for a fragment (see [`crate::room`]).
    pub fn plan(&self, o: &RouteOptions, size: u64) -> Option<Plan> {
        if size > o.max_object_bytes {
            return None;
        }
        let id = ObjectId::random();
        let width = usize::from(o.k) + usize::from(o.m);
        let geo = Geometry {
            k: o.k,
            m: o.m,
            stripe_bytes: o.stripe_bytes,
            size,
        };
        let room = geo.fragment_len();
        let targets: Vec<PeerRef> = self
            .node
            .fleet
            .ranked(&id.to_string())
            .into_iter()
            .filter(|p| self.node.has_room(p, room))
            .take(width)
            .collect();
        (targets.len() >= usize::from(o.w)).then(|| Plan {
            id,
            geo,
            targets,
            w: usize::from(o.w),
        })
    }

    /// Stages `body` as planned; see [`Outcome`]. Fewer than k durable fragments is a 503
    /// SlowDown, never a false 200.
    pub async fn stage(
        &self,
        plan: Plan,
        obj: Object<'_>,
        body: &mut dyn BodySource,
        trace: &mut Vec<Phase>,
    ) -> Result<Outcome, S3Error> {
        let (w, k) = (plan.w, usize::from(plan.geo.k));
        let (record, reports, targets) = self.place(plan, obj, body, trace).await?;
        let got = reports.len();
        match Quorum::count(reports, w) {
            Ok(q) => self.journal(record, q, w, trace).await,
            Err(short) if got >= k => {
                tracing::warn!(id = %record.id, %short, "fragments short of the quorum: writing the origin first");
                Ok(Outcome::NeedsSync(Box::new(record)))
            }
            Err(short) => {
                self.abandon(record.id, &targets).await;
                Err(slow_down(&short))
            }
        }
    }

    /// Stages one part of a multipart upload: durable on w nodes (each part is acknowledged
    /// like a write), not journaled (the upload is, at its completion). Its record names the
    /// fragments.
    pub async fn stage_part(
        &self,
        plan: Plan,
        obj: Object<'_>,
        body: &mut dyn BodySource,
        trace: &mut Vec<Phase>,
    ) -> Result<Record, S3Error> {
        let w = plan.w;
        let (record, reports, targets) = self.place(plan, obj, body, trace).await?;
        match Quorum::count(reports, w) {
            Ok(_) => Ok(record),
            Err(short) => {
                self.abandon(record.id, &targets).await;
                Err(slow_down(&short))
            }
        }
    }

    /// Encodes `body` and streams its fragments to the planned nodes; the record (with the
    /// placements reported durable) and the reports.
    async fn place(
        &self,
        plan: Plan,
        obj: Object<'_>,
        body: &mut dyn BodySource,
        trace: &mut Vec<Phase>,
    ) -> Result<(Record, Vec<FsyncReport>, Vec<PeerRef>), S3Error> {
        let Plan {
            id, geo, targets, ..
        } = plan;
        let started = Started::now();
        let mut senders = Vec::new();
        let mut tasks = JoinSet::new();
        for (i, peer) in targets.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Bytes>(2);
            senders.push(Some(tx));
            let me = self.clone();
            let peer = peer.clone();
            tasks.spawn(async move { me.send_fragment(id, i as u8, geo, peer, rx).await });
        }
        let encoded = self
            .encode(id, geo, body, &mut senders, &obj.expected)
            .await
            .and_then(|md5| crate::etag::of_write(md5, &obj.parts, geo.size));
        let etag = match encoded {
            Ok(e) => e,
            Err(e) => {
                drop(senders);
                tasks.abort_all();
                self.abandon(id, &targets).await;
                return Err(e);
            }
        };
        drop(senders);
        let encoded = started.elapsed();
        let mut reports = Vec::new();
        while let Some(r) = tasks.join_next().await {
            if let Ok(Some(rep)) = r {
                reports.push(rep);
            }
        }
        crate::metrics::phase("place", started.elapsed());
        floe_core::spans::record(trace, || {
            Phase::new("writeback.place", started)
                .attr("writeback.id", id)
                .attr("writeback.bytes", geo.size)
                .attr("writeback.fragments_durable", reports.len())
        });
        tracing::debug!(%id, size = geo.size, reports = reports.len(), encoded_ms = encoded.as_millis() as u64, ms = started.elapsed().as_millis() as u64, "fragments placed");
        let placements: Vec<Placement> = reports
            .iter()
            .map(|r| Placement {
                index: r.index,
                node: r.node.clone(),
                addr: targets
                    .get(usize::from(r.index))
                    .map_or(String::new(), |p| p.addr.to_string()),
            })
            .collect();
        let record = Record {
            id,
            bucket: obj.bucket.to_owned(),
            key: obj.key.to_owned(),
            etag,
            headers: obj.headers,
            geometry: geo,
            placements,
            coordinator: self.node.me().to_owned(),
            acked_ms: self.stamp(obj.bucket, obj.key),
            parts: obj.parts,
            copies: 0,
        };
        Ok((record, reports, targets))
    }

    /// Reads the body, checks its length, encodes it stripe by stripe and hands each fragment
    /// its shard; returns the quoted MD5 ETag.
    async fn encode(
        &self,
        id: ObjectId,
        geo: Geometry,
        body: &mut dyn BodySource,
        senders: &mut [Option<mpsc::Sender<Bytes>>],
        expected: &crate::digests::Expected,
    ) -> Result<String, S3Error> {
        let stripe = geo.stripe_bytes as usize;
        let mut etag = crate::etag::Etag::start(expected.checksum());
        let mut buf = BytesMut::with_capacity(stripe.min(geo.size as usize));
        let mut enc = Some(Encoder::new(geo));
        let (mut j, mut total) = (0u64, 0u64);
        let headers: Vec<Bytes> = (0..senders.len())
            .map(|i| codec::header(&geo, i as u8, id.bytes()))
            .collect();
        if geo.size == 0 {
            for (tx, h) in senders.iter_mut().zip(&headers) {
                send(tx, h.clone()).await;
            }
        }
        while let Some(piece) = body.next().await? {
            total += piece.len() as u64;
            if total > geo.size {
                return Err(S3Error::new(
                    S3ErrorCode::InvalidRequest,
                    "body longer than its length",
                ));
            }
            buf.extend_from_slice(&piece);
            etag.update(piece).await;
            while buf.len() >= stripe || (total == geo.size && !buf.is_empty()) {
                let data = buf.split_to(stripe.min(buf.len())).freeze();
                let mut e = enc
                    .take()
                    .ok_or_else(|| S3Error::internal("encoder lost"))?;
                let (e, shards) = tokio::task::spawn_blocking(move || {
                    let s = e.encode(j, &data);
                    (e, s)
                })
                .await
                .map_err(S3Error::internal)?;
                enc = Some(e);
                // A fleet narrower than k + m (but at least w) places fewer fragments than
                // the codec makes: the rest are erasures from the start.
                let shards = shards.map_err(S3Error::internal)?;
                for ((tx, header), shard) in senders.iter_mut().zip(&headers).zip(shards) {
                    let piece = if j == 0 {
                        [header.clone(), shard].concat().into()
                    } else {
                        shard
                    };
                    send(tx, piece).await;
                }
                j += 1;
            }
        }
        if total != geo.size {
            return Err(S3Error::new(
                S3ErrorCode::IncompleteBody,
                format!("{total} of {} bytes received", geo.size),
            ));
        }
        // Checked before any fragment commits: a body that is not what its client hashed is
        // never acknowledged (BadDigest), its fragments are abandoned.
        let hashed = etag.finish().await.map_err(S3Error::internal)?;
        expected.verify(&hashed.etag, hashed.checksum.as_deref())?;
        Ok(hashed.etag)
    }

    /// Streams fragment `index` to `peer`: the pieces on `rx`, then a commit. `None` when any
    /// step failed (the fragment does not count).
    async fn send_fragment(
        &self,
        id: ObjectId,
        index: u8,
        geo: Geometry,
        peer: PeerRef,
        mut rx: mpsc::Receiver<Bytes>,
    ) -> Option<FsyncReport> {
        let len = geo.fragment_len();
        let (mut off, mut failed) = (0u64, false);
        let mut flying = JoinSet::new();
        let landed = |r: Option<Result<Result<PeerReply, PeerError>, JoinError>>| {
            matches!(r, None | Some(Ok(Ok(PeerReply { status: 200, .. }))))
        };
        while let Some(piece) = rx.recv().await {
            while !failed && flying.len() >= PIECES_IN_FLIGHT {
                failed = !landed(flying.join_next().await);
            }
            if failed {
                continue; // drain, so the encoder never waits on a dead fragment
            }
            let call = Call::PutFragment {
                id,
                idx: index,
                len,
                off,
            }
            .with_body(piece);
            off += call.body.len() as u64;
            let (node, peer) = (self.node.clone(), peer.clone());
            flying.spawn(async move { node.call(&peer, call).await });
        }
        while let Some(r) = flying.join_next().await {
            failed |= !landed(Some(r));
        }
        if failed {
            tracing::debug!(peer = %peer.id, index, "fragment piece refused");
        }
        if failed || off != len {
            return None;
        }
        let call = Call::CommitFragment { id, idx: index }.peer_call();
        match self.node.call(&peer, call).await {
            Ok(r) if r.status == 200 => Some(FsyncReport::answered(
                index,
                String::from_utf8_lossy(&r.body).into_owned(),
                len,
            )),
            _ => None,
        }
    }

    /// Journals `record` with its quorum, copies the record out and indexes it. The write is
    /// acknowledged only once w - 1 fragment nodes besides this one keep the record (the
    /// nodes that just reported their fragments durable), so an acknowledged write's record
    /// is never on this node alone: a coordinator that dies before copying it out leaves a
    /// record no other node holds, which its catch-up recognises as never acknowledged and
    /// drops (see [`crate::catch_up`]) instead of uploading it over the writes acknowledged
    /// since. Short of them the answer is a 503 ([`Outcome::Unconfirmed`]).
    async fn journal(
        &self,
        mut record: Record,
        q: Quorum,
        w: usize,
        trace: &mut Vec<Phase>,
    ) -> Result<Outcome, S3Error> {
        let started = Started::now();
        record.copies = u8::try_from(w.saturating_sub(1)).unwrap_or(u8::MAX);
        let store = self.node.store.clone();
        let acked = tokio::task::spawn_blocking(move || store.journal.commit(record, q))
            .await
            .map_err(S3Error::internal)?
            .map_err(S3Error::internal)?;
        let id = acked.record.id;
        // Not propagated before its request freed the write it overtakes (see `settle`).
        self.node.set_settling(id, true);
        let kept = self.node.replicate(&acked.record).await;
        crate::metrics::phase("journal", started.elapsed());
        floe_core::spans::record(trace, || {
            Phase::new("writeback.journal", started).attr("writeback.id", id)
        });
        self.node.index(Arc::new(acked.record.clone()));
        self.node.journaled.notify_one();
        let want = usize::from(acked.record.copies);
        if kept < want {
            tracing::warn!(%id, kept, want, "journal copies short: the write is not acknowledged");
            let why =
                format!("the write's record reached {kept} of the {want} nodes it needs; retry");
            return Ok(Outcome::Unconfirmed(Box::new(acked), why));
        }
        Ok(Outcome::Staged(Box::new(acked)))
    }

    async fn abandon(&self, id: ObjectId, targets: &[PeerRef]) {
        for peer in targets {
            let call = Call::FreeWrite {
                id,
                at_origin: false,
            }
            .peer_call();
            let _ = self.node.call(peer, call).await;
        }
    }
}

fn slow_down(short: &crate::journal::Shortfall) -> S3Error {
    S3Error::new(
        S3ErrorCode::SlowDown,
        format!("the write could not be made durable ({short}); retry"),
    )
}

/// Sends a piece to a fragment's task; a task that ended (failed) is dropped.
async fn send(tx: &mut Option<mpsc::Sender<Bytes>>, piece: Bytes) {
    if let Some(t) = tx {
        if t.send(piece).await.is_err() {
            *tx = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragments::Fragments;
    use crate::journal::{sample, Journal};
    use crate::service::Store;

    #[test]
    fn a_write_after_another_orders_after_it_even_behind_that_nodes_clock() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(
            Arc::from("n"),
            Fragments::open(&dir.path().join("f"), 64 << 20).unwrap(),
            Journal::open(&dir.path().join("j")).unwrap(),
        );
        let fleet = Arc::new(crate::plugin::Alone(Arc::from("n")));
        let node = Arc::new(Node::new(Arc::new(store), fleet, Default::default()));
        let before = crate::journal::now_ms();
        assert!(
            node.coordinator().stamp("b", "k") >= before,
            "no write of the key: the wall clock"
        );
        // A peer whose clock runs a minute ahead acknowledged a write of k; its copy is here.
        let ahead = before + 60_000;
        node.index(Arc::new(sample("k", 1, "\"e\"", ahead)));
        assert_eq!(node.coordinator().stamp("b", "k"), ahead + 1);
        assert!(
            node.coordinator().stamp("b", "other") < ahead,
            "other keys keep the wall clock"
        );
    }
}
