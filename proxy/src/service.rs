//! The Pingora `ProxyHttp` implementation. `request_filter` decides once which [`Mode`] serves
//! a request (S3 on a route, or the catalog route); every later phase delegates to that mode.
//! What all modes share (request ids, metrics, the access log line) stays here.

use floe_filter::CacheOutcome;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::cache::{CacheKey, RespCacheable};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};

use crate::catalog::CatalogRoute;
use crate::modes::s3::S3Mode;
use crate::modes::{Ctx, Mode, ModeKind};
use crate::ops::{metrics, otel};
use crate::routes::RouteTable;

/// The S3 proxy (and the catalog route, when configured).
pub struct FloeProxy {
    s3: S3Mode,
    catalog: Option<Arc<CatalogRoute>>,
}

impl FloeProxy {
    /// A proxy over a route table and an optional catalog route.
    pub fn new(
        table: Arc<arc_swap::ArcSwap<RouteTable>>,
        catalog: Option<Arc<CatalogRoute>>,
    ) -> Self {
        Self {
            s3: S3Mode::new(table),
            catalog,
        }
    }

    /// The mode serving requests of `kind`.
    fn mode(&self, kind: ModeKind) -> &dyn Mode {
        match (kind, &self.catalog) {
            (ModeKind::Catalog, Some(c)) => c.as_ref(),
            _ => &self.s3,
        }
    }
}

#[async_trait]
impl ProxyHttp for FloeProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::new()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let incoming = session
            .req_header()
            .headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok());
        ctx.f.trace = otel::request_span(incoming);
        if let Some(cat) = &self.catalog {
            let req = session.req_header();
            ctx.catalog = cat.matches(req.method.as_str(), req.uri.path());
            if ctx.catalog.is_some() {
                ctx.kind = ModeKind::Catalog;
                return Ok(false);
            }
        }
        let trace = ctx.f.trace;
        floe_core::trace::scope(trace, self.s3.request_filter(session, ctx)).await
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        self.mode(ctx.kind).upstream_peer(session, ctx).await
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(t) = &ctx.f.trace {
            // Before the mode signs the request: the origin sees the header it was signed with.
            req.insert_header("traceparent", t.header())?;
        }
        self.mode(ctx.kind)
            .upstream_request_filter(session, req, ctx)
            .await
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        self.mode(ctx.kind)
            .request_body_filter(body, end, ctx)
            .await
    }

    fn request_cache_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        self.mode(ctx.kind).request_cache_filter(session, ctx)
    }

    fn cache_key_callback(&self, session: &Session, ctx: &mut Ctx) -> Result<CacheKey> {
        self.mode(ctx.kind).cache_key_callback(session, ctx)
    }

    fn response_cache_filter(
        &self,
        session: &Session,
        resp: &ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<RespCacheable> {
        self.mode(ctx.kind)
            .response_cache_filter(session, resp, ctx)
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        self.mode(ctx.kind)
            .response_filter(session, resp, ctx)
            .await
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        self.mode(ctx.kind)
            .upstream_response_filter(resp, ctx)
            .await
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        ctx.origin_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
        self.mode(ctx.kind)
            .upstream_response_body_filter(body, end, ctx)?;
        Ok(None)
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        e: Box<Error>,
    ) -> Box<Error> {
        self.mode(ctx.kind).fail_to_connect(ctx, e)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        let e = e.more_context(format!("Peer: {peer}"));
        self.mode(ctx.kind)
            .error_while_proxy(session, e, ctx, client_reused)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let code = self.mode(ctx.kind).fail_to_proxy(session, e, ctx).await;
        ctx.status = code;
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session
            .response_written()
            .map_or(ctx.status, |r| r.status.as_u16());
        self.mode(ctx.kind).logging(ctx, status).await;
        let route = ctx.route.as_ref().map_or("-", |r| r.bucket.as_str());
        let origin = ctx.route.as_ref().map_or("-", |r| r.origin.name.as_str());
        ctx.origin_bytes += std::mem::take(&mut ctx.f.origin_bytes);
        let finished = metrics::Finished {
            request_id: ctx.f.request_id,
            route,
            origin,
            op: ctx.f.op.as_str(),
            status,
            cache: ctx.f.cache.map_or("pass", CacheOutcome::as_str),
            elapsed: ctx.start.elapsed(),
            origin_bytes: ctx.origin_bytes,
            phases: &ctx.f.phases,
            trace: ctx.f.trace,
        };
        metrics::record(&finished);
        otel::record(&finished);
        tracing::info!(
            request_id = %ctx.f.request_id,
            route,
            op = ctx.f.op.as_str(),
            method = %session.req_header().method,
            status,
            origin_bytes = ctx.origin_bytes,
            ms = finished.elapsed.as_secs_f64() * 1000.0,
            access_key = ctx.f.access_key.as_deref().unwrap_or("-"),
            cache = ctx.f.cache.map_or("-", CacheOutcome::as_str),
            error = e.map(|e| e.to_string()).or_else(|| ctx.failure.as_ref().map(|f| floe_core::chain(f))),
            "request"
        );
    }
}
