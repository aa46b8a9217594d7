//! The Pingora `ProxyHttp` implementation: route, run the route's filter chain, forward to the
//! origin re-signed, and account for the result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{FilterCtx, ObjectKey, S3Error, S3ErrorCode, S3Op};
use floe_sigv4::canonical::decode;
use pingora::cache::{CacheKey, CachePhase, NoCacheReason, RespCacheable};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use tokio::sync::OwnedSemaphorePermit;

use crate::catalog::{CatalogReq, CatalogRoute};
use crate::origin::QUEUE_WAIT;
use crate::routes::{Route, RouteTable};
use crate::{metrics, otel, respond};

/// Per-request state.
pub struct Ctx {
    f: FilterCtx,
    route: Option<Arc<Route>>,
    raw_key: String,
    query: String,
    start: Instant,
    permit: Option<OwnedSemaphorePermit>,
    tries: usize,
    origin_bytes: u64,
    failure: Option<S3Error>,
    status: u16,
    catalog: Option<CatalogReq>,
}

/// The S3 proxy (and the catalog route, when configured).
pub struct FloeProxy {
    table: RouteTable,
    catalog: Option<Arc<CatalogRoute>>,
}

impl FloeProxy {
    /// A proxy over a route table and an optional catalog route.
    pub fn new(table: RouteTable, catalog: Option<Arc<CatalogRoute>>) -> Self {
        Self { table, catalog }
    }

    /// The catalog route and this request's place in it, for catalog requests.
    fn catalog<'a>(&'a self, ctx: &'a Ctx) -> Option<(&'a CatalogRoute, &'a CatalogReq)> {
        Some((self.catalog.as_deref()?, ctx.catalog.as_ref()?))
    }

    /// Routes, verifies and filters; `Ok(true)` means a response was already written.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool, S3Error> {
        let req = session.req_header();
        let host = req.headers.get("host").and_then(|v| v.to_str().ok());
        let addressed = self.table.address(host, req.uri.path());
        let query = req.uri.query().unwrap_or("");
        let copy = req.headers.contains_key("x-amz-copy-source");
        ctx.f.op = S3Op::classify(
            req.method.as_str(),
            !addressed.bucket.is_empty(),
            !addressed.raw_key.is_empty(),
            query,
            copy,
        );
        ctx.raw_key = addressed.raw_key.to_owned();
        ctx.query = strip_presign(query);
        let bucket = addressed.bucket.to_owned();
        let Some(route) = self.table.get(&bucket).cloned() else {
            let mut scratch = FilterCtx::new(ctx.f.op);
            use floe_core::RequestFilter;
            self.table
                .any_client
                .request_filter(session, &mut scratch)
                .await?;
            if ctx.f.op == S3Op::ListBuckets {
                let key = scratch.access_key.unwrap_or_default();
                let buckets = self.table.buckets_for(&key);
                ctx.status = respond::list_buckets(session, ctx.f.request_id, &buckets, &key)
                    .await
                    .map_err(|e| S3Error::new(S3ErrorCode::InternalError, e.to_string()))?;
                return Ok(true);
            }
            return Err(S3Error::new(
                S3ErrorCode::NoSuchBucket,
                "The specified bucket does not exist",
            ));
        };
        ctx.f.bucket = Some(route.bucket.clone());
        if !ctx.raw_key.is_empty() {
            let key = ObjectKey::parse(&decode(&ctx.raw_key))
                .map_err(|e| S3Error::new(S3ErrorCode::InvalidArgument, e.to_string()))?;
            ctx.f.key = Some(key);
        }
        ctx.route = Some(route.clone());
        for filter in &route.filters {
            if filter.request_filter(session, &mut ctx.f).await? {
                return Ok(true);
            }
        }
        if ctx.f.op == S3Op::Unsupported {
            return Err(S3Error::new(
                S3ErrorCode::NotImplemented,
                "Floe does not carry this operation",
            ));
        }
        if copy {
            check_copy_source(session.req_header(), route.bucket.as_str())?;
        }
        if route.origin.breaker.is_open() {
            metrics::origin_failure(&route.origin.name, "breaker_open");
            return Err(S3Error::new(
                S3ErrorCode::SlowDown,
                "The origin is unavailable; please reduce your request rate and retry.",
            ));
        }
        Ok(false)
    }
}

/// Drops presigned-URL auth parameters from a query before it is forwarded.
fn strip_presign(query: &str) -> String {
    if !query.contains("X-Amz-") {
        return query.to_owned();
    }
    query
        .split('&')
        .filter(|p| !p.starts_with("X-Amz-"))
        .collect::<Vec<_>>()
        .join("&")
}

/// CopyObject and UploadPartCopy may only copy within the route's bucket.
fn check_copy_source(req: &RequestHeader, bucket: &str) -> Result<(), S3Error> {
    let src = req
        .headers
        .get("x-amz-copy-source")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let src = decode(src);
    let src = src.strip_prefix('/').unwrap_or(&src);
    match src.split_once('/') {
        Some((b, k)) if b == bucket && !k.is_empty() => Ok(()),
        Some((b, _)) if b != bucket => Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "x-amz-copy-source must name an object in the same bucket",
        )),
        _ => Err(S3Error::new(
            S3ErrorCode::InvalidArgument,
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
        )),
    }
}

fn s3_to_pingora(e: &S3Error) -> Box<Error> {
    Error::explain(ErrorType::Custom("s3"), e.to_string())
}

#[async_trait]
impl ProxyHttp for FloeProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            f: FilterCtx::new(S3Op::Unsupported),
            route: None,
            raw_key: String::new(),
            query: String::new(),
            start: Instant::now(),
            permit: None,
            tries: 0,
            origin_bytes: 0,
            failure: None,
            status: 0,
            catalog: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if let Some(cat) = &self.catalog {
            let req = session.req_header();
            ctx.catalog = cat.matches(req.method.as_str(), req.uri.path());
            if ctx.catalog.is_some() {
                return Ok(false);
            }
        }
        match self.admit(session, ctx).await {
            Ok(done) => Ok(done),
            Err(e) if session.response_written().is_some() => {
                // A stage failed after its answer began (e.g. the object changed mid-response):
                // drop the connection so the client sees a failed transfer and retries.
                ctx.failure = Some(e.clone());
                Err(Error::explain(ErrorType::Custom("aborted"), e.to_string()))
            }
            Err(e) => {
                ctx.status = respond::error(session, ctx.f.request_id, &e, false).await?;
                ctx.failure = Some(e);
                Ok(true)
            }
        }
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        if let Some((cat, _)) = self.catalog(ctx) {
            return Ok(Box::new(cat.peer()));
        }
        let Some(route) = ctx.route.clone() else {
            return Err(Error::explain(ErrorType::InternalError, "no route"));
        };
        for filter in &route.filters {
            match filter.upstream_peer(session, &mut ctx.f).await {
                Ok(Some(peer)) => return Ok(peer),
                Ok(None) => {}
                Err(e) => {
                    let pe = s3_to_pingora(&e);
                    ctx.failure = Some(e);
                    return Err(pe);
                }
            }
        }
        if ctx.tries > 0 {
            // Exponential backoff with jitter between retries: 25, 50, 100 ms ...
            let base = 25u64 << (ctx.tries - 1).min(6);
            let jitter = rand::random::<u64>() % (base / 2 + 1);
            tokio::time::sleep(Duration::from_millis(base + jitter)).await;
        }
        if ctx.permit.is_none() {
            ctx.permit = route.origin.acquire(QUEUE_WAIT).await;
            if ctx.permit.is_none() {
                metrics::origin_failure(&route.origin.name, "queue_full");
                let e = S3Error::new(
                    S3ErrorCode::SlowDown,
                    "Too many requests in flight to the origin; please retry.",
                );
                let pe = s3_to_pingora(&e);
                ctx.failure = Some(e);
                return Err(pe);
            }
        }
        Ok(Box::new(route.origin.peer(route.bucket.as_str())))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some((cat, _)) = self.catalog(ctx) {
            return cat.rewrite(req);
        }
        let Some(route) = &ctx.route else {
            return Ok(());
        };
        if ctx.f.body_preread {
            req.remove_header("expect");
        }
        route
            .origin
            .prepare(
                req,
                route.bucket.as_str(),
                &ctx.raw_key,
                &ctx.query,
                &ctx.f.payload,
            )
            .map_err(|e| Error::explain(ErrorType::InternalError, e.to_string()))
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let staged = ctx.f.body_stage.is_some();
        if let Some(stage) = ctx.f.body_stage.as_mut() {
            stage.feed(body, end).map_err(|e| {
                let pe = s3_to_pingora(&e);
                ctx.failure = Some(e);
                pe
            })?;
        }
        if let Some(route) = ctx.route.clone() {
            for filter in &route.filters {
                if let Err(e) = filter.request_body_filter(body, end, &mut ctx.f).await {
                    let pe = s3_to_pingora(&e);
                    ctx.failure = Some(e);
                    return Err(pe);
                }
            }
        }
        // A stage that emits its last bytes early leaves an empty final piece. Pingora skips empty
        // pieces mid-body (and reads `None` there as the end), but writes an empty *final* piece
        // as a zero-length chunk, i.e. a terminator, before finishing the body with another one;
        // the origin then reads the stray `0\r\n\r\n` as the next request (400). So the end
        // goes out as `None`.
        if staged && end && body.as_ref().is_some_and(Bytes::is_empty) {
            *body = None;
        }
        Ok(())
    }

    fn request_cache_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        if let Some((cat, c)) = self.catalog(ctx) {
            if !c.mutation && session.req_header().method == http::Method::GET {
                cat.enable(&mut session.cache);
            }
        }
        Ok(())
    }

    fn cache_key_callback(&self, session: &Session, ctx: &mut Ctx) -> Result<CacheKey> {
        match self.catalog(ctx) {
            Some((cat, _)) => Ok(cat.key(session.req_header())),
            None => Err(Error::explain(
                ErrorType::InternalError,
                "cache is catalog-only",
            )),
        }
    }

    fn response_cache_filter(
        &self,
        session: &Session,
        resp: &ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<RespCacheable> {
        Ok(match self.catalog(ctx) {
            Some((cat, c)) => cat.cacheable(session.cache.cache_key(), resp, &c.scope),
            None => RespCacheable::Uncacheable(NoCacheReason::NeverEnabled),
        })
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.catalog.is_some() {
            let label = match session.cache.phase() {
                CachePhase::Hit => "hit",
                CachePhase::Miss | CachePhase::Expired => "miss",
                _ => "pass",
            };
            ctx.f.cache = Some(label);
            ctx.status = resp.status.as_u16();
            resp.insert_header("x-floe-cache", label)?;
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(route) = ctx.route.clone() {
            route.origin.breaker.success();
            for filter in &route.filters {
                if let Err(e) = filter.upstream_response_filter(resp, &mut ctx.f) {
                    let pe = s3_to_pingora(&e);
                    ctx.failure = Some(e);
                    return Err(pe);
                }
            }
        }
        resp.insert_header("x-floe-request-id", ctx.f.request_id.to_string())?;
        resp.insert_header("x-floe-cache", "pass")?;
        ctx.status = resp.status.as_u16();
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        ctx.origin_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
        if let Some(route) = &ctx.route {
            for filter in &route.filters {
                if let Err(e) = filter.upstream_response_body_filter(body, end, &mut ctx.f) {
                    let pe = s3_to_pingora(&e);
                    ctx.failure = Some(e);
                    return Err(pe);
                }
            }
        }
        Ok(None)
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(route) = &ctx.route {
            route.origin.breaker.failure();
            metrics::origin_failure(&route.origin.name, "connect");
            ctx.tries += 1;
            let retry = ctx.f.op.is_idempotent()
                && ctx.tries <= route.origin.retries
                && !route.origin.breaker.is_open();
            e.set_retry(retry);
        }
        e
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        if ctx.failure.is_none() {
            if let Some(route) = &ctx.route {
                metrics::origin_failure(&route.origin.name, "transfer");
            }
        }
        if !ctx.f.op.is_idempotent()
            || session.as_ref().retry_buffer_truncated()
            || ctx.failure.is_some()
        {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        if ctx.catalog.is_some() {
            let code = if session.response_written().is_some() {
                0
            } else {
                let msg = format!(
                    "Floe could not reach the Iceberg REST catalog: {}",
                    e.etype().as_str()
                );
                respond::catalog_error(session, 503, &msg)
                    .await
                    .unwrap_or(0)
            };
            ctx.status = code;
            return FailToProxy {
                error_code: code,
                can_reuse_downstream: false,
            };
        }
        let err = ctx.failure.clone().unwrap_or_else(|| match e.esource() {
            ErrorSource::Upstream => S3Error::new(
                S3ErrorCode::SlowDown,
                "The origin could not be reached; please retry.",
            ),
            _ => S3Error::new(
                S3ErrorCode::InternalError,
                "We encountered an internal error. Please try again.",
            ),
        });
        let downstream_dead = matches!(e.esource(), ErrorSource::Downstream)
            && matches!(
                e.etype(),
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed
            );
        // Once response bytes went out, nothing can be written: the connection is dropped so
        // the client sees a failed transfer, never a short body passed as whole.
        let code = if downstream_dead || session.response_written().is_some() {
            0
        } else {
            respond::error(session, ctx.f.request_id, &err, true)
                .await
                .unwrap_or(0)
        };
        ctx.status = code;
        ctx.failure = Some(err);
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session
            .response_written()
            .map_or(ctx.status, |r| r.status.as_u16());
        let route = ctx.route.as_ref().map_or("-", |r| r.bucket.as_str());
        let origin = ctx.route.as_ref().map_or("-", |r| r.origin.name.as_str());
        ctx.origin_bytes += std::mem::take(&mut ctx.f.origin_bytes);
        let finished = metrics::Finished {
            request_id: ctx.f.request_id,
            route,
            origin,
            op: ctx.f.op.as_str(),
            status,
            cache: ctx.f.cache.unwrap_or("pass"),
            elapsed: ctx.start.elapsed(),
            origin_bytes: ctx.origin_bytes,
        };
        metrics::record(&finished);
        otel::record(&finished);
        if let Some(r) = &ctx.route {
            for f in &r.filters {
                f.logging(&ctx.f, status);
            }
        }
        ctx.permit = None;
        if let Some((cat, c)) = self.catalog(ctx) {
            if c.mutation && (200..300).contains(&status) {
                let purged = cat.after_mutation(&c.scope).await;
                tracing::debug!(scope = %c.scope, purged, "catalog answers purged after a commit");
            }
        }
        tracing::info!(
            request_id = %ctx.f.request_id,
            route,
            op = ctx.f.op.as_str(),
            method = %session.req_header().method,
            status,
            origin_bytes = ctx.origin_bytes,
            ms = finished.elapsed.as_secs_f64() * 1000.0,
            access_key = ctx.f.access_key.as_deref().unwrap_or("-"),
            cache = ctx.f.cache.unwrap_or("-"),
            error = e.map(|e| e.to_string()).or_else(|| ctx.failure.as_ref().map(|f| floe_core::chain(f))),
            "request"
        );
    }
}
