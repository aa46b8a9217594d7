//! The admin API, on its own listener, behind a bearer token: cache stats, purge, warm. The
//! control plane drives warm and purge.
//!
//! - `GET /stats` -> per store: DRAM usage and ceiling, disk ceiling and I/O, hits, misses,
//!   insertions, admissions rejected, origin bytes.
//! - `POST /purge?bucket=B&key=K` or `?bucket=B&prefix=P` -> mappings and blocks dropped.
//! - `POST /warm?bucket=B&key=K[&range=FIRST-LAST|&suffix=N][&store=metadata|data]` -> bytes
//!   warmed.
//! - `GET /object?bucket=B&key=K[&range=..|&suffix=N][&store=..]` -> the bytes, read through the
//!   cache (warming what is missing); `x-floe-object-size`, `x-floe-first-byte` and `etag` say
//!   where they sit in which version. The control plane reads metadata and footers this way.
//! - `GET /accesses[?max=N]` -> drains the access queue (served reads) for the heat ledger.
//! - `POST /classify?bucket=B&store=metadata|data` with a body of keys, one per line -> those
//!   keys are immutable table files of that store; this outranks the path rules.
//! - `POST /catalog/purge?namespace=NS` -> the catalog route's cached answers about NS (dotted)
//!   are dropped; floe-control calls it on every commit it sees.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use floe_blocks::{BlockCache, BlockFilter, OpError, ReadSpan, Store, StoreStats};
use floe_core::{BucketName, ObjectKey};
use floe_sigv4::canonical::decode;

use crate::catalog::CatalogRoute;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::{json, Value};

/// The admin application.
pub struct AdminApp {
    token: String,
    cache: Option<Arc<BlockCache>>,
    blocks: HashMap<String, Arc<BlockFilter>>,
    catalog: Option<Arc<CatalogRoute>>,
}

impl AdminApp {
    /// An admin API over the cache and the routes' block filters.
    pub fn new(
        token: String,
        cache: Option<Arc<BlockCache>>,
        blocks: HashMap<String, Arc<BlockFilter>>,
        catalog: Option<Arc<CatalogRoute>>,
    ) -> Self {
        Self {
            token,
            cache,
            blocks,
            catalog,
        }
    }

    fn authorized(&self, session: &ServerSession) -> bool {
        use subtle::ConstantTimeEq;
        let got = session
            .req_header()
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let want = format!("Bearer {}", self.token);
        got.len() == want.len() && bool::from(got.as_bytes().ct_eq(want.as_bytes()))
    }

    fn stats(&self) -> (u16, Value) {
        let Some(c) = &self.cache else {
            return (404, json!({"error": "no cache configured"}));
        };
        let store = |s: &floe_blocks::BlockStore, st: &StoreStats, disk: usize| {
            let io = s.statistics();
            json!({
                "dram_usage_bytes": s.memory().usage(),
                "dram_capacity_bytes": s.memory().capacity(),
                "disk_capacity_bytes": disk,
                "disk_write_bytes": io.disk_write_bytes(),
                "disk_read_bytes": io.disk_read_bytes(),
                "hits": st.hits.load(Ordering::Relaxed),
                "misses": st.misses.load(Ordering::Relaxed),
                "inserted": st.inserted.load(Ordering::Relaxed),
                "admissions_rejected": st.rejected.load(Ordering::Relaxed),
                "dram_entries": s.memory().entries(),
                "evictions": st.events.evictions.load(Ordering::Relaxed),
                "origin_bytes": st.origin_bytes.load(Ordering::Relaxed),
            })
        };
        (
            200,
            json!({
                "block_bytes": c.settings.block_bytes,
                "foreground_misses": c.foreground_misses.load(Ordering::Relaxed),
                "accesses_dropped": c.access.dropped(),
                "data": store(&c.data, &c.data_stats, c.settings.data.disk_bytes),
                "metadata": store(&c.meta, &c.meta_stats, c.settings.meta.disk_bytes),
            }),
        )
    }

    async fn act(&self, path: &str, q: &HashMap<String, String>) -> (u16, Value) {
        let bucket = q.get("bucket").cloned().unwrap_or_default();
        let Some(filter) = self.blocks.get(&bucket) else {
            return (
                404,
                json!({"error": format!("no cached route for bucket {bucket:?}")}),
            );
        };
        match (path, q.get("key"), q.get("prefix")) {
            ("/purge", Some(k), None) => {
                (200, json!({"keys": 1, "blocks": filter.purge_key(k).await}))
            }
            ("/purge", None, Some(p)) => {
                let (keys, blocks) = filter.purge_prefix(p).await;
                (200, json!({"keys": keys, "blocks": blocks}))
            }
            ("/warm", Some(k), None) => self.warm(filter, &bucket, k, q).await,
            _ => (
                400,
                json!({"error": "use /purge?bucket=&key= | &prefix=, or /warm?bucket=&key=[&range=a-b|&suffix=n][&store=]"}),
            ),
        }
    }

    async fn warm(
        &self,
        filter: &BlockFilter,
        bucket: &str,
        key: &str,
        q: &HashMap<String, String>,
    ) -> (u16, Value) {
        let (b, k, span, store) = match target(bucket, key, q) {
            Ok(t) => t,
            Err(e) => return (400, json!({"error": e})),
        };
        match filter.warm(&b, &k, span, store).await {
            Ok(bytes) => (200, json!({"bytes": bytes})),
            Err(e) => (op_status(&e), json!({"error": e.to_string()})),
        }
    }

    /// `GET /object`: bytes through the cache, raw.
    async fn object(&self, q: &HashMap<String, String>) -> http::Response<Vec<u8>> {
        let bucket = q.get("bucket").map(String::as_str).unwrap_or("");
        let key = q.get("key").map(String::as_str).unwrap_or("");
        let Some(filter) = self.blocks.get(bucket) else {
            return reply(
                404,
                json!({"error": format!("no cached route for bucket {bucket:?}")}),
            );
        };
        let (b, k, span, store) = match target(bucket, key, q) {
            Ok(t) => t,
            Err(e) => return reply(400, json!({"error": e})),
        };
        match filter.read(&b, &k, span, store).await {
            Ok(out) => {
                let mut resp = http::Response::new(out.bytes.to_vec());
                let h = resp.headers_mut();
                for (name, v) in [
                    ("x-floe-object-size", out.size.to_string()),
                    ("x-floe-first-byte", out.first.to_string()),
                    ("etag", out.etag),
                ] {
                    if let Ok(v) = http::HeaderValue::from_str(&v) {
                        h.insert(name, v);
                    }
                }
                resp
            }
            Err(e) => reply(op_status(&e), json!({"error": e.to_string()})),
        }
    }

    /// `GET /accesses`: drains served-read records.
    fn accesses(&self, q: &HashMap<String, String>) -> (u16, Value) {
        let Some(c) = &self.cache else {
            return (404, json!({"error": "no cache configured"}));
        };
        let max = q
            .get("max")
            .and_then(|m| m.parse().ok())
            .unwrap_or(10_000usize);
        let rows: Vec<Value> = c
            .access
            .drain(max)
            .into_iter()
            .map(|a| json!([&*a.bucket, &*a.key, &*a.etag, a.offset, a.len]))
            .collect();
        (
            200,
            json!({"dropped": c.access.dropped(), "accesses": rows}),
        )
    }

    /// `POST /classify`: pins the body's keys as immutable files of one store.
    async fn classify(
        &self,
        session: &mut ServerSession,
        q: &HashMap<String, String>,
    ) -> (u16, Value) {
        let bucket = q.get("bucket").map(String::as_str).unwrap_or("");
        let Some(filter) = self.blocks.get(bucket) else {
            return (
                404,
                json!({"error": format!("no cached route for bucket {bucket:?}")}),
            );
        };
        let store = match q.get("store").map(String::as_str) {
            Some("metadata") => Store::Metadata,
            Some("data") => Store::Data,
            _ => return (400, json!({"error": "store must be metadata or data"})),
        };
        let mut body = Vec::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_CLASSIFY_BODY => {
                    body.extend_from_slice(&chunk)
                }
                Ok(Some(_)) => return (413, json!({"error": "body over 16 MiB"})),
                Ok(None) => break,
                Err(e) => return (400, json!({"error": e.to_string()})),
            }
        }
        let keys: Vec<String> = String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let pinned = filter.pin(&keys, store);
        (200, json!({"keys": keys.len(), "pinned": pinned}))
    }
}

/// Largest `POST /classify` body: about 100k keys.
const MAX_CLASSIFY_BODY: usize = 16 << 20;

type Target = (BucketName, ObjectKey, ReadSpan, Option<Store>);

/// Parses the bucket, key, span (`range=FIRST-LAST` or `suffix=N`) and store of a request.
/// The admin status of a failed cache operation: 404 for a missing object, else 502 (the
/// origin or a fill failed behind the cache).
fn op_status(e: &OpError) -> u16 {
    match e {
        OpError::NotFound => 404,
        OpError::OverCap(_) => 413,
        OpError::Origin(_) | OpError::Serve(_) => 502,
    }
}

fn target(bucket: &str, key: &str, q: &HashMap<String, String>) -> Result<Target, String> {
    let (Ok(b), Ok(k)) = (BucketName::parse(bucket), ObjectKey::parse(key)) else {
        return Err("invalid bucket or key".into());
    };
    let span = match (q.get("range"), q.get("suffix")) {
        (None, None) => ReadSpan::Whole,
        (Some(r), None) => match r
            .split_once('-')
            .map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>()))
        {
            Some((Ok(a), Ok(b))) if a <= b => ReadSpan::Range(a, b),
            _ => return Err("range must be FIRST-LAST".into()),
        },
        (None, Some(n)) => match n.parse::<u64>() {
            Ok(n) if n > 0 => ReadSpan::Suffix(n),
            _ => return Err("suffix must be a positive byte count".into()),
        },
        (Some(_), Some(_)) => return Err("give range or suffix, not both".into()),
    };
    let store = match q.get("store").map(String::as_str) {
        None => None,
        Some("metadata") => Some(Store::Metadata),
        Some("data") => Some(Store::Data),
        Some(other) => return Err(format!("store {other:?} is not metadata or data")),
    };
    Ok((b, k, span, store))
}

fn reply(status: u16, body: Value) -> http::Response<Vec<u8>> {
    let mut resp = http::Response::new(body.to_string().into_bytes());
    *resp.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        if !self.authorized(session) {
            return reply(401, json!({"error": "missing or wrong bearer token"}));
        }
        let req = session.req_header();
        let method = req.method.as_str().to_owned();
        let path = req.uri.path().to_owned();
        let q = query(req.uri.query().unwrap_or(""));
        let (status, body) = match (method.as_str(), path.as_str()) {
            ("GET", "/stats") => self.stats(),
            ("GET", "/object") => return self.object(&q).await,
            ("GET", "/accesses") => self.accesses(&q),
            ("POST", "/classify") => self.classify(session, &q).await,
            ("POST", "/catalog/purge") => match &self.catalog {
                Some(c) => {
                    let ns = q.get("namespace").map(String::as_str).unwrap_or("");
                    (200, json!({"purged": c.purge(ns).await}))
                }
                None => (404, json!({"error": "no catalog route configured"})),
            },
            ("POST", "/purge" | "/warm") => self.act(&path, &q).await,
            _ => (404, json!({"error": "unknown admin endpoint"})),
        };
        reply(status, body)
    }
}
