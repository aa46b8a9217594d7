//! A deterministic write-back fleet in one process: N [`Node`]s over their own fragment
//! stores and journals (a temporary folder), an in-memory fleet ([`fleet`]) whose peer calls
//! can be dropped, a scripted origin ([`origin`]), and the request path's durability code run
//! as the filter runs it ([`Node::settle`], [`Node::flush_object`], the caught-up gate). The
//! background workers do not run by themselves: a schedule drives their passes, so every
//! interleaving a test sees is one it chose (see [`props`] for the property test).

mod cases;
pub mod fleet;
pub mod origin;
mod props;
mod unacked;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_core::{ByteStream, S3Error, S3ErrorCode};

use crate::config::RouteOptions;
use crate::fragments::Fragments;
use crate::journal::Journal;
use crate::node::Node;
use crate::propagate::{Origins, Propagator};
use crate::repair::Repairer;
use crate::service::Store;
use crate::stage::{BodySource, Object};
use fleet::{MemFleet, Registry};
use origin::MemOrigin;

/// Runs `f` to its end on a one-thread runtime (each test its own, so schedules never mix).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The one bucket.
pub const BUCKET: &str = "lake";

/// A request's body, in pieces of at most 1 KiB.
struct Pieces(Bytes);

#[async_trait::async_trait]
impl BodySource for Pieces {
    async fn next(&mut self) -> Result<Option<Bytes>, S3Error> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let n = self.0.len().min(1024);
        Ok(Some(self.0.split_to(n)))
    }
}

/// The test bed.
pub struct Bed {
    dir: tempfile::TempDir,
    /// The origin.
    pub origin: Arc<MemOrigin>,
    /// The fleet.
    pub registry: Arc<Registry>,
    ids: Vec<String>,
    nodes: Vec<Option<Arc<Node>>>,
    origins: Origins,
    opts: RouteOptions,
}

fn slow_down(why: impl std::fmt::Display) -> S3Error {
    S3Error::new(S3ErrorCode::SlowDown, why.to_string())
}

impl Bed {
    /// `n` nodes with geometry `k`+`m`, `w` fsync reports to acknowledge; call faults from
    /// `seed`. Every node is started and caught up.
    pub async fn new(n: usize, k: u8, m: u8, w: u8, seed: u64) -> Self {
        let ids: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        let origin = Arc::new(MemOrigin::default());
        let origins = Origins::default();
        origins.write().unwrap().insert(
            BUCKET.into(),
            origin.clone() as Arc<dyn floe_core::OriginReader>,
        );
        let mut bed = Self {
            dir: tempfile::tempdir().unwrap(),
            origin,
            registry: Registry::new(&ids, seed),
            ids,
            nodes: vec![None; n],
            origins,
            opts: RouteOptions {
                k,
                m,
                w,
                max_object_bytes: 1 << 20,
                stripe_bytes: 4096,
            },
        };
        for i in 0..n {
            bed.start(i).await;
        }
        for i in 0..n {
            bed.catch_up(i, true).await;
        }
        bed
    }

    /// Node `i`, when it runs (a node may die during a call: see [`fleet::Registry`]).
    pub fn node(&self, i: usize) -> Option<&Arc<Node>> {
        self.nodes[i]
            .as_ref()
            .filter(|_| self.registry.is_up(&self.ids[i]))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Starts node `i` over what its disk holds (its journal replayed, served once it caught
    /// up); does nothing if it runs.
    pub async fn start(&mut self, i: usize) {
        if self.node(i).is_some() {
            return;
        }
        let id = self.ids[i].clone();
        let root = self.dir.path().join(&id);
        let store = Store::new(
            Arc::from(id.as_str()),
            Fragments::open(&root.join("fragments"), 64 << 20).unwrap(),
            Journal::open(&root.join("journal")).unwrap(),
        );
        let fleet = Arc::new(MemFleet {
            me: Arc::from(id.as_str()),
            registry: self.registry.clone(),
        });
        let node = Arc::new(Node::new(Arc::new(store), fleet, Default::default()));
        let _ = node.origins.set(self.origins.clone());
        for r in node.store.journal.replay().unwrap() {
            node.replay(r);
        }
        self.registry.up(&id, node.clone());
        self.nodes[i] = Some(node);
    }

    /// Kills node `i` (kill -9: what it fsynced stays on its disk).
    pub fn kill(&mut self, i: usize) {
        self.registry.down(&self.ids[i]);
        self.nodes[i] = None;
    }

    /// Freezes node `i` (SIGSTOP): it stays in every view, answers nothing, does nothing.
    pub fn pause(&self, i: usize) {
        self.registry.pause(&self.ids[i], true);
    }

    /// Thaws node `i` (SIGCONT): it notices it was away and catches up before it answers.
    pub fn resume(&self, i: usize) {
        if !self.registry.is_paused(&self.ids[i]) {
            return;
        }
        self.registry.pause(&self.ids[i], false);
        if let Some(n) = self.node(i) {
            n.readiness.back_from_away(crate::journal::now_ms());
        }
    }

    /// Node `i` when it runs and is not frozen (a frozen node does no work).
    fn awake(&self, i: usize) -> Option<&Arc<Node>> {
        self.node(i)
            .filter(|_| !self.registry.is_paused(&self.ids[i]))
    }

    /// One catch-up pass of node `i` (`give_up`: its grace is over).
    pub async fn catch_up(&self, i: usize, give_up: bool) {
        if let Some(n) = self.awake(i).filter(|n| !n.is_caught_up()) {
            n.catch_up(give_up).await;
        }
    }

    fn serving(&self, i: usize) -> Result<&Arc<Node>, S3Error> {
        let node = self
            .awake(i)
            .ok_or_else(|| slow_down("the node is down or frozen"))?;
        match node.is_caught_up() {
            true => Ok(node),
            false => Err(slow_down("the node is catching up")),
        }
    }

    /// A PUT of `body` as `key` through node `i`, as the filter runs it: staged when the
    /// fleet can take it, else to the origin after the key's staged write. The ETag.
    pub async fn put(&self, i: usize, key: &str, body: Bytes) -> Result<String, S3Error> {
        self.put_with(i, key, body, Default::default()).await
    }

    /// A PUT of `body` as `key` through node `i` that is killed (kill -9) as it sends a call
    /// to `path`, once `first` such calls left: the client never hears back; what it fsynced
    /// stays on its disk.
    pub async fn put_dying_at(
        &mut self,
        i: usize,
        key: &str,
        body: Bytes,
        path: &str,
        first: usize,
    ) {
        self.registry.crash_sending(&self.ids[i], path, first);
        {
            let put = self.put(i, key, body);
            tokio::pin!(put);
            tokio::select! {
                _ = &mut put => panic!("the PUT ended although its node died"),
                _ = self.registry.crashed.notified() => {}
            }
            // The calls that reached a peer before the death are served there to their end.
            tokio::select! {
                _ = &mut put => panic!("the PUT ended although its node died"),
                _ = self.registry.served() => {}
            }
        }
        self.kill(i);
    }

    /// [`Bed::put`] with the integrity headers the client sent (`expected`).
    pub async fn put_with(
        &self,
        i: usize,
        key: &str,
        body: Bytes,
        expected: crate::digests::Expected,
    ) -> Result<String, S3Error> {
        let node = self.serving(i)?;
        let prior = node.staged.get(BUCKET, key);
        let Some(plan) = node.coordinator().plan(&self.opts, body.len() as u64) else {
            node.flush_object(BUCKET, key).await?;
            return self.origin.store(key, body).map_err(slow_down);
        };
        let obj = Object {
            bucket: BUCKET,
            key,
            headers: Vec::new(),
            expected,
            parts: Vec::new(),
        };
        let mut phases = Vec::new();
        let outcome = node
            .coordinator()
            .stage(plan, obj, &mut Pieces(body), &mut phases)
            .await?;
        Ok(node.settle(prior.as_ref(), outcome).await?.0)
    }

    /// A write of `key` through node `i` completed from `parts` (a CompleteMultipartUpload
    /// of parts already staged); returns the ETag answered.
    pub async fn put_parts(&self, i: usize, key: &str, parts: &[Bytes]) -> Result<String, S3Error> {
        use md5::Digest;
        let node = self.serving(i)?;
        let prior = node.staged.get(BUCKET, key);
        let body: Bytes = parts.concat().into();
        let plan = node
            .coordinator()
            .plan(&self.opts, body.len() as u64)
            .ok_or_else(|| S3Error::new(floe_core::S3ErrorCode::InternalError, "no plan"))?;
        let spans = parts
            .iter()
            .map(|p| crate::journal::Part {
                size: p.len() as u64,
                etag: format!("\"{}\"", hex::encode(md5::Md5::digest(p))),
            })
            .collect();
        let obj = Object {
            bucket: BUCKET,
            key,
            headers: Vec::new(),
            expected: Default::default(),
            parts: spans,
        };
        let mut phases = Vec::new();
        let outcome = node
            .coordinator()
            .stage(plan, obj, &mut Pieces(body), &mut phases)
            .await?;
        Ok(node.settle(prior.as_ref(), outcome).await?.0)
    }

    /// A DELETE of `key` through node `i`: the key's staged writes land first, then the
    /// origin deletes it.
    pub async fn delete(&self, i: usize, key: &str) -> Result<(), S3Error> {
        let node = self.serving(i)?;
        node.flush_object(BUCKET, key).await?;
        self.origin.delete(key).map_err(slow_down)
    }

    /// A GET of `key` through node `i`: the staged write it indexes, else the origin's
    /// object; `None` for no such key.
    pub async fn get(&self, i: usize, key: &str) -> Result<Option<Bytes>, S3Error> {
        let node = self.serving(i)?;
        if let Some(r) = node.staged.get(BUCKET, key) {
            let size = r.geometry.size;
            if size == 0 {
                return Ok(Some(Bytes::new()));
            }
            let mut body = node.range(r, 0, size - 1);
            let mut all = BytesMut::new();
            while let Some(piece) = body.next().await.map_err(slow_down)? {
                all.extend_from_slice(&piece);
            }
            return Ok(Some(all.freeze()));
        }
        let bucket = floe_core::BucketName::parse(BUCKET).unwrap();
        let object = floe_core::ObjectKey::parse(key).unwrap();
        use floe_core::OriginReader;
        match self.origin.get_current(&bucket, &object, None).await {
            Ok(mut f) => {
                let mut all = BytesMut::new();
                while let Some(piece) = f.body.next().await.map_err(slow_down)? {
                    all.extend_from_slice(&piece);
                }
                Ok(Some(all.freeze()))
            }
            Err(floe_core::OriginError::NotFound) => Ok(None),
            Err(e) => Err(slow_down(e)),
        }
    }

    /// One propagation pass of node `i` (every write due).
    pub async fn propagate(&self, i: usize) {
        let Some(node) = self.awake(i) else { return };
        let p = Propagator {
            node: node.clone(),
            origins: self.origins.clone(),
            retry_max: Duration::from_secs(1),
            concurrency: 2,
            counts: Default::default(),
        };
        p.pass(&mut HashMap::new()).await;
    }

    /// One repair pass of node `i`: a scrub of the writes it propagates, then the copies of
    /// other coordinators' writes checked. The fragments it rebuilt.
    pub async fn repair(&self, i: usize) -> u64 {
        let Some(node) = self.awake(i) else { return 0 };
        let r = Repairer {
            node: node.clone(),
            scrub_every: Duration::from_secs(1),
            grace: Duration::ZERO,
            orphan_after: Duration::from_secs(3600),
            counts: Default::default(),
            origins: self.origins.clone(),
        };
        r.pass(true, &mut HashMap::new()).await;
        r.prune_copies(&mut HashMap::new()).await;
        r.counts.repaired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Heals everything (every node up, the origin back, no dropped calls) and runs the
    /// workers until no node holds a staged write; the rounds it took.
    pub async fn heal(&mut self) -> usize {
        self.registry.calm();
        self.origin
            .cut
            .store(false, std::sync::atomic::Ordering::SeqCst);
        for i in 0..self.len() {
            self.resume(i);
            self.start(i).await;
        }
        for round in 1..=20 {
            for i in 0..self.len() {
                self.catch_up(i, true).await;
                self.repair(i).await;
                self.propagate(i).await;
            }
            if self.staged() == 0 {
                return round;
            }
        }
        let mut left = Vec::new();
        for n in (0..self.len()).filter_map(|i| self.node(i)) {
            for r in n.staged.all() {
                let at: Vec<&str> = r.placements.iter().map(|p| p.node.as_str()).collect();
                let upload = match n.propagates(&r) {
                    true => format!("{:?}", crate::propagate::upload(n, &*self.origin, &r).await),
                    false => "not its to propagate".into(),
                };
                left.push(format!(
                    "{} indexes {} {} (coordinator {}, fragments on {at:?}, current {}): upload {upload}",
                    n.me(), r.key, r.id, r.coordinator, n.staged.current(&r)
                ));
            }
        }
        panic!("staged writes left after 20 rounds: {left:#?}");
    }

    /// Staged writes indexed across the fleet.
    pub fn staged(&self) -> usize {
        (0..self.len())
            .filter_map(|i| self.node(i))
            .map(|n| n.staged.len())
            .sum()
    }
}
