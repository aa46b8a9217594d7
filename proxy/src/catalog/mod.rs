//! The `catalog` route: a shallow Iceberg REST proxy under a path prefix (default `/catalog`).
//! Successful GETs (config, namespace and table lists, loadTable) are cached with pingora-cache,
//! keyed by path, query and the caller's Authorization header (catalogs answer per principal);
//! everything else passes straight through. A successful mutation through the route purges the
//! cached answers of its namespace (and the namespace-less ones: config, namespace lists), and the
//! control plane purges a namespace when it sees a commit made elsewhere. The catalog stays the
//! system of record: entries also expire after `ttl`.

pub mod index;

use std::time::{Duration, Instant, SystemTime};

use floe_core::config::{ConfigCx, ConfigError};
use pingora::cache::eviction::simple_lru;
use pingora::cache::key::CompactCacheKey;
use pingora::cache::lock::{CacheKeyLockImpl, CacheLock};
use pingora::cache::storage::{PurgeOutcome, PurgeTarget, PurgeType, Storage};
use pingora::cache::trace::Span;
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
    /// Cached keys by scope, so a namespace's answers can be purged (bounded).
    index: ScopeIndex<CompactCacheKey>,
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

    /// The cache key: the caller's Authorization (hashed) and the path with query.
    pub fn key(&self, req: &RequestHeader) -> CacheKey {
        let auth = req
            .headers
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or(b"");
        let principal = hex::encode(Sha256::digest(auth));
        let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
        CacheKey::new(format!("{principal}\n{target}"), "")
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

    /// Drops every cached answer of `scope` (a dotted namespace; "" for config and lists).
    /// Returns how many entries were purged.
    pub async fn purge(&self, scope: &str) -> usize {
        let keys = self.index.take(scope);
        let span = Span::inactive().handle();
        let mut n = 0;
        for k in &keys {
            if let Ok(PurgeOutcome::Purged(_)) = self
                .storage
                .purge(PurgeTarget::Active(k), PurgeType::Invalidation, &span)
                .await
            {
                n += 1;
            }
        }
        n
    }

    /// After a successful mutation: its namespace's answers and the namespace-less ones go; a
    /// mutation without a namespace (multi-table commit, rename) clears everything.
    pub async fn after_mutation(&self, scope: &str) -> usize {
        if scope.is_empty() {
            let scopes = self.index.scopes();
            let mut n = 0;
            for s in scopes {
                n += self.purge(&s).await;
            }
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
        assert_ne!(r.key(&a).to_compact(), r.key(&b).to_compact());
    }
}
