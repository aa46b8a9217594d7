//! The block cache's admin endpoints (on the proxy's admin listener, behind its token):
//!
//! - `GET /stats` -> per store: DRAM usage and ceiling, disk ceiling and I/O, hits, misses,
//!   insertions, admissions rejected, origin bytes.
//! - `POST /purge?bucket=B&key=K` or `?bucket=B&prefix=P` -> mappings and blocks dropped.
//! - `POST /warm?bucket=B&key=K[&range=FIRST-LAST|&suffix=N][&store=metadata|data][&replica=0]`
//!   -> bytes warmed; `replica=0`: in a fleet, only the blocks' owners keep them.
//! - `GET /object?bucket=B&key=K[&range=..|&suffix=N][&store=..]` -> the bytes, read through the
//!   cache (warming what is missing); `x-floe-object-size`, `x-floe-first-byte` and `etag` say
//!   where they sit in which version. The control plane reads metadata and footers this way.
//! - `GET /accesses[?max=N]` -> drains the access queue (served reads) for the heat ledger.
//! - `POST /classify?bucket=B&store=metadata|data` with a body of keys, one per line -> those
//!   keys are immutable table files of that store; this outranks the path rules.
//! - `POST /chunks?bucket=B` with a [`wire::ChunksBody`] -> one table's column chunks per live
//!   data file (the control plane's file map), for column-chunk fills; `GET /chunks?bucket=B&key=K`
//!   -> the chunks held for one file, as `[start, len, ...]`.
//! - `POST /settle` -> answers once every block and mapping written so far is on disk (before
//!   a planned stop, or a test's kill -9).
//! - `PUT /kept?bucket=B` with a [`wire::KeptBody`] -> the route's pinned files (409 past
//!   `cache.pinned_bytes`); `GET /kept?bucket=B` -> what is kept ([`wire::KeptDoc`]).
//! - `POST /held?bucket=B` with a [`wire::HeldBody`] -> bytes this node holds of each key.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use floe_core::wire;
use floe_core::{BucketName, ObjectKey};
use floe_filter::plugin::{AdminHandler, AdminRequest, AdminResponse};

use crate::admin_docs::{ChunksDoc, ClassifyDoc, PurgeDoc};
use crate::cache::{BlockCache, StoreStats};
use crate::classify::Store;
use crate::filter::BlockFilter;
use crate::hints::FileChunks;
use crate::ops::{OpError, ReadSpan};
use crate::store::BlockStore;

/// The admin endpoints over the cache and the routes' stages.
pub struct BlocksAdmin {
    cache: Arc<BlockCache>,
    routes: Arc<RwLock<HashMap<String, Arc<BlockFilter>>>>,
}

/// What a warm or read addresses.
type Target = (BucketName, ObjectKey, ReadSpan, Option<Store>);

impl BlocksAdmin {
    /// Endpoints over `cache` and the stages in `routes` (by bucket).
    pub fn new(
        cache: Arc<BlockCache>,
        routes: Arc<RwLock<HashMap<String, Arc<BlockFilter>>>>,
    ) -> Self {
        Self { cache, routes }
    }

    fn route(&self, req: &AdminRequest) -> Result<Arc<BlockFilter>, AdminResponse> {
        let bucket = req.param("bucket");
        self.routes
            .read()
            .ok()
            .and_then(|r| r.get(bucket).cloned())
            .ok_or_else(|| {
                AdminResponse::error(404, format!("no cached route for bucket {bucket:?}"))
            })
    }

    fn stats(&self) -> AdminResponse {
        AdminResponse::doc(200, &stats(&self.cache))
    }

    async fn purge(&self, req: &AdminRequest) -> AdminResponse {
        let filter = match self.route(req) {
            Ok(f) => f,
            Err(r) => return r,
        };
        match (req.query.get("key"), req.query.get("prefix")) {
            (Some(k), None) => {
                let blocks = filter.purge_key(k).await;
                AdminResponse::doc(200, &PurgeDoc { keys: 1, blocks })
            }
            (None, Some(p)) => {
                let (keys, blocks) = filter.purge_prefix(p).await;
                AdminResponse::doc(200, &PurgeDoc { keys, blocks })
            }
            _ => AdminResponse::error(400, "use /purge?bucket=&key= or /purge?bucket=&prefix="),
        }
    }

    /// The route's stage and what a warm or read addresses.
    fn addressed(&self, req: &AdminRequest) -> Result<(Arc<BlockFilter>, Target), AdminResponse> {
        let filter = self.route(req)?;
        let t = target(req).map_err(|e| AdminResponse::error(400, e))?;
        Ok((filter, t))
    }

    async fn warm(&self, req: &AdminRequest) -> AdminResponse {
        let (filter, (b, k, span, store)) = match self.addressed(req) {
            Ok(a) => a,
            Err(r) => return r,
        };
        let replica = req.param("replica") != "0";
        match filter.warm(&b, &k, span, store, replica).await {
            Ok(bytes) => AdminResponse::doc(200, &wire::WarmDoc { bytes }),
            Err(e) => AdminResponse::error(op_status(&e), e),
        }
    }

    /// `GET /object`: bytes through the cache, raw.
    async fn object(&self, req: &AdminRequest) -> AdminResponse {
        let (filter, (b, k, span, store)) = match self.addressed(req) {
            Ok(a) => a,
            Err(r) => return r,
        };
        match filter.read(&b, &k, span, store).await {
            Ok(out) => AdminResponse {
                status: 200,
                headers: vec![
                    (wire::OBJECT_SIZE, out.size.to_string()),
                    (wire::FIRST_BYTE, out.first.to_string()),
                    ("etag", out.etag),
                ],
                body: out.bytes,
                json: false,
            },
            Err(e) => AdminResponse::error(op_status(&e), e),
        }
    }

    /// `GET /accesses`: drains served-read records.
    fn accesses(&self, req: &AdminRequest) -> AdminResponse {
        let max = req.param("max").parse().unwrap_or(10_000usize);
        let accesses = self
            .cache
            .access
            .drain(max)
            .into_iter()
            .map(|a| {
                let (b, k, e) = (a.bucket.to_string(), a.key.to_string(), a.etag.to_string());
                wire::AccessRecord(b, k, e, a.offset, a.len)
            })
            .collect();
        let dropped = self.cache.access.dropped();
        AdminResponse::doc(200, &wire::AccessesDoc { dropped, accesses })
    }

    /// `POST /classify`: pins the body's keys as immutable files of one store.
    fn classify(&self, req: &AdminRequest) -> AdminResponse {
        let filter = match self.route(req) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let Some(store) = wire::StoreName::parse(req.param("store")) else {
            return AdminResponse::error(400, "store must be metadata or data");
        };
        let keys: Vec<String> = String::from_utf8_lossy(&req.body)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let pinned = filter.pin(&keys, store.into()) as u64;
        let keys = keys.len() as u64;
        AdminResponse::doc(200, &ClassifyDoc { keys, pinned })
    }
}

impl BlocksAdmin {
    /// `PUT /kept?bucket=`: the route's pinned files (see [`crate::kept`]); 409 when they do
    /// not fit `cache.pinned_bytes` here (nothing changed then).
    async fn keep(&self, req: &AdminRequest) -> AdminResponse {
        let filter = match self.route(req) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let body: wire::KeptBody = match serde_json::from_slice(&req.body) {
            Ok(b) => b,
            Err(e) => return AdminResponse::error(400, format!("bad kept body: {e}")),
        };
        match filter.keep(&body).await {
            Ok(doc) => AdminResponse::doc(200, &doc),
            Err(e) => AdminResponse::error(409, e.to_string()),
        }
    }

    /// `POST /held?bucket=`: bytes held of each key (see [`crate::held`]); 413 past
    /// [`crate::held::MAX_HELD_KEYS`] keys.
    async fn held(&self, req: &AdminRequest) -> AdminResponse {
        let filter = match self.route(req) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let body: wire::HeldBody = match serde_json::from_slice(&req.body) {
            Ok(b) => b,
            Err(e) => return AdminResponse::error(400, format!("bad held body: {e}")),
        };
        if body.keys.len() > crate::held::MAX_HELD_KEYS {
            return AdminResponse::error(
                413,
                format!("at most {} keys per request", crate::held::MAX_HELD_KEYS),
            );
        }
        let bytes = filter.held(&body.keys).await;
        AdminResponse::doc(200, &wire::HeldDoc { bytes })
    }

    /// `POST /chunks`: one table's column chunks.
    fn publish_chunks(&self, req: &AdminRequest) -> AdminResponse {
        if let Err(r) = self.route(req) {
            return r;
        }
        let body: wire::ChunksBody = match serde_json::from_slice(&req.body) {
            Ok(b) => b,
            Err(e) => return AdminResponse::error(400, format!("chunks body: {e}")),
        };
        let files = body
            .files
            .into_iter()
            .map(|f| {
                let pairs = f.c.chunks_exact(2).map(|p| (p[0], p[1]));
                (f.k, FileChunks::new(f.s, pairs))
            })
            .collect();
        let hints = &self.cache.hints;
        let p = hints.publish(req.param("bucket"), &body.table, body.replace, files);
        let chunks = hints.chunks() as u64;
        AdminResponse::doc(
            200,
            &ChunksDoc {
                files: p.files,
                refused: p.refused,
                chunks,
            },
        )
    }

    /// `GET /chunks`: one file's chunks, `[start, len, ...]`.
    fn file_chunks(&self, req: &AdminRequest) -> AdminResponse {
        let (bucket, key) = (req.param("bucket"), req.param("key"));
        match self.cache.hints.get(bucket, key, None) {
            Some(f) => {
                let c: Vec<u64> = f.chunks.iter().flat_map(|(s, e)| [*s, e - s]).collect();
                let doc = wire::FileChunksDoc {
                    k: key.to_owned(),
                    s: f.size,
                    c,
                };
                AdminResponse::doc(200, &doc)
            }
            None => AdminResponse::error(404, format!("no chunks held for {bucket}/{key}")),
        }
    }
}

#[async_trait]
impl AdminHandler for BlocksAdmin {
    async fn handle(&self, req: &AdminRequest) -> Option<AdminResponse> {
        Some(match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/stats") => self.stats(),
            ("GET", "/object") => self.object(req).await,
            ("GET", "/accesses") => self.accesses(req),
            ("POST", "/classify") => self.classify(req),
            ("POST", "/chunks") => self.publish_chunks(req),
            ("PUT", "/kept") => self.keep(req).await,
            ("POST", "/held") => self.held(req).await,
            ("GET", "/kept") => match self.route(req) {
                Ok(f) => AdminResponse::doc(200, &f.kept_now().await),
                Err(r) => r,
            },
            ("GET", "/chunks") => self.file_chunks(req),
            ("POST", "/purge") => self.purge(req).await,
            ("POST", "/settle") => {
                self.cache.settle().await;
                AdminResponse::doc(200, &self.cache.disk_written())
            }
            ("POST", "/warm") if req.query.contains_key("key") => self.warm(req).await,
            ("POST", "/warm") => AdminResponse::error(
                400,
                "use /warm?bucket=&key=[&range=a-b|&suffix=n][&store=metadata|data]",
            ),
            _ => return None,
        })
    }
}

/// One store's counters.
fn store_stats(s: &BlockStore, st: &StoreStats, disk: usize) -> wire::StoreStatsDoc {
    let io = s.statistics();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    wire::StoreStatsDoc {
        dram_usage_bytes: s.memory().usage() as u64,
        dram_capacity_bytes: s.memory().capacity() as u64,
        disk_capacity_bytes: disk as u64,
        disk_write_bytes: io.disk_write_bytes() as u64,
        disk_read_bytes: io.disk_read_bytes() as u64,
        hits: n(&st.hits),
        misses: n(&st.misses),
        inserted: n(&st.inserted),
        admissions_rejected: n(&st.rejected),
        dram_entries: s.memory().entries() as u64,
        evictions: n(&st.events.evictions),
        origin_bytes: n(&st.origin_bytes),
        peer_bytes: n(&st.peer_bytes),
        disk_served_bytes: n(&st.disk_served_bytes),
        disk_pages_written: n(&st.events.pages.written),
        disk_pages_dropped: n(&st.events.pages.dropped),
    }
}

/// What `GET /stats` answers (and the cache's metrics show).
pub fn stats(c: &BlockCache) -> wire::StatsDoc {
    wire::StatsDoc {
        block_bytes: c.settings.block_bytes,
        foreground_misses: c.foreground_misses.load(Ordering::Relaxed),
        accesses_dropped: c.access.dropped(),
        data: store_stats(&c.data, &c.data_stats, c.settings.data.disk_bytes),
        metadata: store_stats(&c.meta, &c.meta_stats, c.settings.meta.disk_bytes),
        kept: store_stats(&c.kept, &c.kept_stats, 0),
        shares: c
            .shares
            .iter()
            .zip(&c.settings.shares)
            .map(|(sh, set)| {
                let doc = store_stats(&sh.store, &sh.stats, set.store.disk_bytes);
                (sh.bucket.to_string(), doc)
            })
            .collect(),
        hint_chunks: c.hints.chunks() as u64,
        small_reads: c.neighbours.counts(),
        buffers: crate::pool::BufferPool::shared().doc(),
        boot: c.boot,
    }
}

/// The admin status of a failed cache operation: 404 for a missing object, 413 over a cap,
/// else 502 (the origin or a fill failed behind the cache).
fn op_status(e: &OpError) -> u16 {
    match e {
        OpError::NotFound => 404,
        OpError::OverCap(_) => 413,
        OpError::Origin(_) | OpError::Serve(_) => 502,
    }
}

/// Parses the bucket, key, span (`range=FIRST-LAST` or `suffix=N`) and store of a request.
fn target(req: &AdminRequest) -> Result<Target, String> {
    let (Ok(b), Ok(k)) = (
        BucketName::parse(req.param("bucket")),
        ObjectKey::parse(req.param("key")),
    ) else {
        return Err("invalid bucket or key".into());
    };
    let range = req.query.get("range").map(String::as_str);
    let suffix = req.query.get("suffix").map(String::as_str);
    let span = ReadSpan::from_query(range, suffix)?;
    let store = match req.query.get("store") {
        None => None,
        Some(s) => match wire::StoreName::parse(s) {
            Some(n) => Some(n.into()),
            None => return Err(format!("store {s:?} is not metadata or data")),
        },
    };
    Ok((b, k, span, store))
}

/// Bodies up to this size are accepted by the admin listener (`/classify`: about 100k keys).
pub const MAX_ADMIN_BODY: usize = 16 << 20;
