//! The `catalog` route: a shallow Iceberg REST proxy under a path prefix (default `/catalog`).
//! Successful GETs (config, namespace and table lists, loadTable) are cached with pingora-cache,
//! keyed by path, query and the caller's Authorization header (catalogs answer per principal);
//! everything else passes straight through. A successful mutation through the route purges the
//! cached answers of its namespace (and the namespace-less ones: config, namespace lists), and the
//! control plane purges a namespace when it sees a commit made elsewhere. The catalog stays the
//! system of record: entries also expire after `ttl`.

pub mod index;

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use floe_core::config::{ConfigCx, ConfigError};
use pingora::cache::eviction::simple_lru;
use pingora::cache::key::CompactCacheKey;
use pingora::cache::lock::{CacheKeyLockImpl, CacheLock};
use pingora::cache::{CacheKey, CacheMeta, MemCache, NoCacheReason, RespCacheable};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use sha2::{Digest, Sha256};

use crate::catalog::index::{ScopeIndex, MAX_INDEXED};
use crate::config::file::CatalogSection;
use crate::config::settings::RouteSpec;

/// The catalog route's settings (validated in `crate::config::settings`).
#[derive(Debug, Clone)]
pub struct CatalogSpec {
    /// Path prefix, e.g. `/catalog`.
    pub prefix: String,
    /// Upstream host:port.
    pub address: String,
    /// Upstream host name (Host header, SNI).
    pub host: String,
    /// HTTPS upstream.
    pub tls: bool,
    /// Path of the catalog's base URI (`/` or e.g. `/api/catalog`), without a trailing slash.
    pub base: String,
    /// Freshness of a cached answer without a purge.
    pub ttl: Duration,
    /// Cache size ceiling.
    pub cache_bytes: usize,
}

impl CatalogSpec {
    /// Validates the `catalog:` section (the path must not shadow a route's bucket).
    pub fn validate(
        cx: &ConfigCx<'_>,
        c: &CatalogSection,
        routes: &[RouteSpec],
    ) -> Result<Self, ConfigError> {
        let u = url::Url::parse(&c.upstream)
            .map_err(|e| cx.err("catalog.upstream", format!("{:?}: {e}", c.upstream)))?;
        let tls = match u.scheme() {
            "http" => false,
            "https" => true,
            s => return Err(cx.err("catalog.upstream", format!("scheme {s:?} is not http(s)"))),
        };
        let host = u.host_str().unwrap_or_default().to_owned();
        let port = u.port_or_known_default().unwrap_or(80);
        let seg = c.path.trim_start_matches('/');
        if !c.path.starts_with('/') || seg.is_empty() || seg.contains('/') || c.path.ends_with('/')
        {
            return Err(cx.err("catalog.path", "one path segment, like /catalog"));
        }
        if routes.iter().any(|r| r.bucket.matches(seg)) {
            return Err(cx.err(
                "catalog.path",
                format!("bucket {seg:?} has a route; the catalog path would shadow it"),
            ));
        }
        if c.ttl_ms > 86_400_000 {
            return Err(cx.err("catalog.ttl_ms", "at most one day"));
        }
        Ok(Self {
            prefix: c.path.clone(),
            address: format!("{host}:{port}"),
            host,
            tls,
            base: u.path().trim_end_matches('/').to_owned(),
            ttl: std::time::Duration::from_millis(c.ttl_ms),
            cache_bytes: c.cache_bytes.max(1 << 20),
        })
    }
}

/// What one request through the route is.
#[derive(Debug, Clone)]
pub struct CatalogReq {
    /// Namespace the request is about (dotted), empty when none.
    pub scope: String,
    /// Not a GET/HEAD.
    pub mutation: bool,
    /// The route's purges when the request began: its answer is cached only if none ran since.
    pub purges: u64,
}

/// The route, built once at startup.
pub struct CatalogRoute {
    spec: CatalogSpec,
    storage: &'static MemCache,
    eviction: &'static simple_lru::Manager,
    lock: &'static CacheKeyLockImpl,
    /// Cached keys by scope: how many answers a purge drops, and the purge count a request
    /// notes when it begins (bounded).
    index: ScopeIndex<CompactCacheKey>,
    /// What a purge changes: every cache key carries its scope's generation, so a purge makes
    /// the scope's answers unreachable without touching the store (see [`Generations`]).
    generations: Generations,
}

/// Generations of the cached answers: one for everything, and one per slot of scopes (a scope
/// hashes to a slot; two scopes sharing one purge each other's answers, which costs a miss and
/// is never stale). A purge bumps them instead of removing entries from pingora's store: its
/// `MemCache` removes a fill under way too, and that fill's end then panics its request. The
/// answers left behind are unreachable and leave with the LRU's `cache_bytes` bound.
struct Generations {
    all: AtomicU64,
    slots: Box<[AtomicU64]>,
}

/// Scope slots: a few KiB, and collisions rare for the namespaces one catalog has.
const SCOPE_SLOTS: usize = 1024;

impl Generations {
    fn new() -> Self {
        Self {
            all: AtomicU64::new(0),
            slots: (0..SCOPE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, scope: &str) -> &AtomicU64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        scope.hash(&mut h);
        let i = (h.finish() % self.slots.len() as u64) as usize;
        &self.slots[i]
    }

    /// The generation an answer of `scope` is cached under now.
    fn of(&self, scope: &str) -> (u64, u64) {
        let all = self.all.load(Ordering::SeqCst);
        (all, self.slot(scope).load(Ordering::SeqCst))
    }

    fn bump(&self, scope: &str) {
        self.slot(scope).fetch_add(1, Ordering::SeqCst);
    }

    fn bump_all(&self) {
        self.all.fetch_add(1, Ordering::SeqCst);
    }
}

impl CatalogRoute {
    /// Builds the route. The cache parts are leaked once: pingora-cache wants `'static` stores.
    pub fn new(spec: CatalogSpec) -> Self {
        // pingora-cache's in-memory storage holds these small JSON answers; the LRU manager
        // bounds it to `cache_bytes`.
        let eviction = Box::leak(Box::new(simple_lru::Manager::new(spec.cache_bytes)));
        let lock: &'static CacheKeyLockImpl =
            Box::leak(Box::new(CacheLock::new(Duration::from_secs(5))));
        Self {
            storage: Box::leak(Box::new(MemCache::new())),
            eviction,
            lock,
            index: ScopeIndex::new(MAX_INDEXED, spec.ttl),
            generations: Generations::new(),
            spec,
        }
    }

    /// The request's place in the route, when `path` is under the prefix.
    pub fn matches(&self, method: &str, path: &str) -> Option<CatalogReq> {
        let rest = path.strip_prefix(&self.spec.prefix)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        Some(CatalogReq {
            scope: scope_of(rest),
            mutation: !matches!(method, "GET" | "HEAD"),
            purges: self.index.purges(),
        })
    }

    /// The upstream peer.
    pub fn peer(&self) -> HttpPeer {
        HttpPeer::new(
            self.spec.address.as_str(),
            self.spec.tls,
            self.spec.host.clone(),
        )
    }

    /// Points the request at the upstream: prefix swapped for the base path, Host rewritten.
    pub fn rewrite(&self, req: &mut RequestHeader) -> pingora::Result<()> {
        let path = req.uri.path();
        let rest = path.strip_prefix(&self.spec.prefix).unwrap_or(path);
        let mut target = format!("{}{}", self.spec.base, rest);
        if target.is_empty() {
            target.push('/');
        }
        if let Some(q) = req.uri.query() {
            target = format!("{target}?{q}");
        }
        let uri = target
            .parse()
            .map_err(|e| pingora::Error::because(pingora::ErrorType::InternalError, "uri", e))?;
        req.set_uri(uri);
        req.insert_header("host", self.spec.host.as_str())?;
        Ok(())
    }

    /// Turns the cache on for a GET.
    pub fn enable(&self, cache: &mut pingora::cache::HttpCache) {
        cache.enable(
            self.storage,
            Some(self.eviction),
            None,
            Some(self.lock),
            None,
        );
    }

    /// The cache key: the caller's Authorization (hashed), the path with query, and the
    /// generation of the request's scope (`scope`: see [`CatalogReq`]).
    pub fn key(&self, req: &RequestHeader, scope: &str) -> CacheKey {
        let auth = req
            .headers
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or(b"");
        let principal = hex::encode(Sha256::digest(auth));
        let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
        let (all, slot) = self.generations.of(scope);
        CacheKey::new(format!("{principal}\n{all}.{slot}\n{target}"), "")
    }

    /// Caches 200 answers for `ttl` and remembers their key under the request's scope, unless
    /// a purge ran since the request began (the answer may predate the commit it follows).
    pub fn cacheable(
        &self,
        key: &CacheKey,
        resp: &ResponseHeader,
        req: &CatalogReq,
    ) -> RespCacheable {
        if resp.status.as_u16() != 200 {
            return RespCacheable::Uncacheable(NoCacheReason::OriginNotCache);
        }
        let indexed_at = Instant::now();
        if !self
            .index
            .insert(&req.scope, key.to_compact(), indexed_at, req.purges)
        {
            let why = "catalog index full, or purged since the request began";
            return RespCacheable::Uncacheable(NoCacheReason::Custom(why));
        }
        let cached_at = SystemTime::now();
        let fresh_until = cached_at + self.spec.ttl;
        RespCacheable::Cacheable(CacheMeta::new(fresh_until, cached_at, 0, 0, resp.clone()))
    }

    /// Drops every cached answer of `scope` (a dotted namespace; "" for config and lists):
    /// they become unreachable at once. Returns how many there were.
    pub async fn purge(&self, scope: &str) -> usize {
        let keys = self.index.take(scope);
        self.generations.bump(scope);
        keys.len()
    }

    /// After a successful mutation: its namespace's answers and the namespace-less ones go; a
    /// mutation without a namespace (multi-table commit, rename) clears everything.
    pub async fn after_mutation(&self, scope: &str) -> usize {
        if scope.is_empty() {
            let scopes = self.index.scopes();
            let mut n = 0;
            for s in scopes {
                n += self.index.take(&s).len();
            }
            // After the takes: a request that reads the old generation began before the
            // last take, so its answer is refused (see `ScopeIndex::insert`).
            self.generations.bump_all();
            return n;
        }
        self.purge(scope).await + self.purge("").await
    }
}

/// The namespace a REST path is about: the segment after `namespaces`, percent-decoded, with
/// the REST spec's 0x1F separator shown as a dot. Empty when there is none.
fn scope_of(path: &str) -> String {
    let mut parts = path.split('/');
    while let Some(p) = parts.next() {
        if p == "namespaces" {
            return parts
                .next()
                .map(|ns| floe_core::uri::decode(ns).replace('\u{1f}', "."))
                .unwrap_or_default();
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> CatalogRoute {
        CatalogRoute::new(CatalogSpec {
            prefix: "/catalog".into(),
            address: "127.0.0.1:8181".into(),
            host: "127.0.0.1".into(),
            tls: false,
            base: "/api".into(),
            ttl: Duration::from_secs(30),
            cache_bytes: 1 << 20,
        })
    }

    #[test]
    fn scopes_come_from_the_namespace_segment() {
        assert_eq!(scope_of("/v1/namespaces/db/tables/t"), "db");
        assert_eq!(scope_of("/v1/wh/namespaces/a%1Fb/tables"), "a.b");
        assert_eq!(scope_of("/v1/namespaces"), "");
        assert_eq!(scope_of("/v1/config"), "");
    }

    #[test]
    fn only_paths_under_the_prefix_match() {
        let r = route();
        let m = r
            .matches("POST", "/catalog/v1/namespaces/db/tables/t")
            .unwrap();
        assert!(m.mutation && m.scope == "db");
        assert!(!r.matches("GET", "/catalog").unwrap().mutation);
        assert!(r.matches("GET", "/catalogue/x").is_none());
        assert!(r.matches("GET", "/bucket/key").is_none());
    }

    #[test]
    fn rewrite_swaps_prefix_for_base_and_keeps_query() {
        let r = route();
        let mut req = RequestHeader::build("GET", b"/catalog/v1/config?warehouse=w", None).unwrap();
        r.rewrite(&mut req).unwrap();
        assert_eq!(req.uri.to_string(), "/api/v1/config?warehouse=w");
        assert_eq!(req.headers["host"], "127.0.0.1");
    }

    #[test]
    fn keys_differ_by_principal() {
        let r = route();
        let mut a = RequestHeader::build("GET", b"/catalog/v1/config", None).unwrap();
        let b = a.clone();
        a.insert_header("authorization", "Bearer x").unwrap();
        assert_ne!(r.key(&a, "").to_compact(), r.key(&b, "").to_compact());
    }

    fn ok() -> ResponseHeader {
        ResponseHeader::build(200, None).unwrap()
    }

    #[tokio::test]
    async fn a_purge_during_a_fill_leaves_the_fill_to_finish_unreachable() {
        use pingora::cache::storage::Storage;
        let r = route();
        let req = RequestHeader::build("GET", b"/catalog/v1/namespaces/db/tables/t", None).unwrap();
        let got = r
            .matches("GET", "/catalog/v1/namespaces/db/tables/t")
            .unwrap();
        let key = r.key(&req, &got.scope);
        let RespCacheable::Cacheable(meta) = r.cacheable(&key, &ok(), &got) else {
            panic!("a 200 is cacheable");
        };
        let span = pingora::cache::trace::Span::inactive().handle();
        let mut fill = r
            .storage
            .get_miss_handler(&key, &meta, &span)
            .await
            .unwrap();
        fill.write_body(bytes::Bytes::from_static(b"{}"), false)
            .await
            .unwrap();
        // A commit of the namespace while the answer is still streaming into the cache.
        assert_eq!(r.after_mutation("db").await, 1);
        fill.write_body(bytes::Bytes::new(), true).await.unwrap();
        // Removing the fill from the store made this panic (pingora's MemCache unwraps it).
        fill.finish().await.unwrap();
        let next = r.key(&req, "db");
        assert_ne!(
            next.to_compact(),
            key.to_compact(),
            "the old answer is unreachable"
        );
        assert!(r.storage.lookup(&next, &span).await.unwrap().is_none());
    }

    #[test]
    fn a_purge_moves_its_scope_and_the_scopeless_answers_only() {
        let r = route();
        let req = RequestHeader::build("GET", b"/catalog/v1/x", None).unwrap();
        let keys = |r: &CatalogRoute| ["db", "other", ""].map(|s| r.key(&req, s).to_compact());
        let before = keys(&r);
        block_on(r.after_mutation("db"));
        let after = keys(&r);
        assert_ne!(before[0], after[0]);
        assert_eq!(before[1], after[1], "another namespace keeps its answers");
        assert_ne!(before[2], after[2], "config and lists go with every commit");
        block_on(r.after_mutation(""));
        let all = keys(&r);
        assert!(
            (0..3).all(|i| all[i] != after[i]),
            "a commit without a namespace moves all"
        );
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
