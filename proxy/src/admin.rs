//! The admin API, on its own listener, behind a bearer token: cache stats, purge, warm. The
//! control plane drives warm and purge.
//!
//! - `GET /stats` -> per store: DRAM usage and ceiling, disk ceiling and I/O, hits, misses,
//!   insertions, admissions rejected, origin bytes.
//! - `POST /purge?bucket=B&key=K` or `?bucket=B&prefix=P` -> mappings and blocks dropped.
//! - `POST /warm?bucket=B&key=K[&range=FIRST-LAST][&store=metadata|data]` -> bytes warmed.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use floe_blocks::{BlockCache, BlockFilter, Store, StoreStats};
use floe_core::{BucketName, ObjectKey};
use floe_sigv4::canonical::decode;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::{json, Value};

/// The admin application.
pub struct AdminApp {
    token: String,
    cache: Option<Arc<BlockCache>>,
    blocks: HashMap<String, Arc<BlockFilter>>,
}

impl AdminApp {
    /// An admin API over the cache and the routes' block filters.
    pub fn new(
        token: String,
        cache: Option<Arc<BlockCache>>,
        blocks: HashMap<String, Arc<BlockFilter>>,
    ) -> Self {
        Self {
            token,
            cache,
            blocks,
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
            ("/purge", Some(k), None) => (200, json!({"keys": 1, "blocks": filter.purge_key(k)})),
            ("/purge", None, Some(p)) => {
                let (keys, blocks) = filter.purge_prefix(p);
                (200, json!({"keys": keys, "blocks": blocks}))
            }
            ("/warm", Some(k), None) => self.warm(filter, &bucket, k, q).await,
            _ => (
                400,
                json!({"error": "use /purge?bucket=&key= | &prefix=, or /warm?bucket=&key=[&range=a-b][&store=]"}),
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
        let (Ok(b), Ok(k)) = (BucketName::parse(bucket), ObjectKey::parse(key)) else {
            return (400, json!({"error": "invalid bucket or key"}));
        };
        let range = match q.get("range").map(|r| {
            r.split_once('-')
                .map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>()))
        }) {
            None => None,
            Some(Some((Ok(a), Ok(b)))) if a <= b => Some((a, b)),
            Some(_) => return (400, json!({"error": "range must be FIRST-LAST"})),
        };
        let store = match q.get("store").map(String::as_str) {
            None => None,
            Some("metadata") => Some(Store::Metadata),
            Some("data") => Some(Store::Data),
            Some(other) => {
                return (
                    400,
                    json!({"error": format!("store {other:?} is not metadata or data")}),
                )
            }
        };
        match filter.warm(&b, &k, range, store).await {
            Ok(bytes) => (200, json!({"bytes": bytes})),
            Err(e) => (502, json!({"error": e})),
        }
    }
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
        let (status, body) = if !self.authorized(session) {
            (401, json!({"error": "missing or wrong bearer token"}))
        } else {
            let req = session.req_header();
            let method = req.method.as_str().to_owned();
            let path = req.uri.path().to_owned();
            let q = query(req.uri.query().unwrap_or(""));
            match (method.as_str(), path.as_str()) {
                ("GET", "/stats") => self.stats(),
                ("POST", "/purge" | "/warm") => self.act(&path, &q).await,
                _ => (404, json!({"error": "unknown admin endpoint"})),
            }
        };
        let mut resp = http::Response::new(body.to_string().into_bytes());
        *resp.status_mut() =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        resp
    }
}
