//! The kinds of request the S3 listeners carry, decided once per request in `request_filter`:
//! S3 (a route and its filter chain) and the catalog route; peer requests between fleet nodes
//! come next. Each kind implements [`Mode`], the Pingora phases it takes part in, and the
//! service delegates every phase to the request's mode: no phase asks "which route is this".

pub mod bucket_list;
pub mod catalog;
pub mod post;
pub mod respond;
pub mod s3;

use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{S3Error, S3Op};
use floe_filter::FilterCtx;
use pingora::cache::{CacheKey, NoCacheReason, RespCacheable};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::Session;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

use crate::catalog::CatalogReq;
use crate::routes::Route;

/// Which mode serves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeKind {
    /// An S3 request on a route.
    #[default]
    S3,
    /// A request under the catalog route's path.
    Catalog,
}

/// Per-request state of every mode.
pub struct Ctx {
    /// The mode, set in `request_filter`.
    pub kind: ModeKind,
    /// The filter chain's context.
    pub f: FilterCtx,
    /// The route (S3 mode).
    pub route: Option<Arc<Route>>,
    /// The raw, still-encoded key (S3 mode).
    pub raw_key: String,
    /// The query to forward (presign parameters dropped).
    pub query: String,
    /// When the request arrived.
    pub start: Instant,
    /// The origin concurrency permit held while upstream.
    pub permit: Option<OwnedSemaphorePermit>,
    /// Connection attempts so far.
    pub tries: usize,
    /// Bytes received from the upstream.
    pub origin_bytes: u64,
    /// The S3 error this request failed with, if any.
    pub failure: Option<S3Error>,
    /// The status written, when the proxy wrote the answer itself.
    pub status: u16,
    /// The request's place in the catalog route (catalog mode).
    pub catalog: Option<CatalogReq>,
}

impl Default for Ctx {
    fn default() -> Self {
        Self::new()
    }
}

impl Ctx {
    /// A context for a new request.
    pub fn new() -> Self {
        Self {
            kind: ModeKind::S3,
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
}

/// The Pingora phases one kind of request takes part in, after `request_filter` chose it.
/// Phases with a default do nothing (or refuse caching) for modes that do not need them.
#[async_trait]
pub trait Mode: Send + Sync {
    /// Where the request goes.
    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>>;

    /// Rewrites the request for the upstream (path, host, signature).
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()>;

    /// Each piece of the request body on its way upstream.
    async fn request_body_filter(
        &self,
        _body: &mut Option<Bytes>,
        _end: bool,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        Ok(())
    }

    /// Turns Pingora's HTTP cache on for this request, if the mode caches.
    fn request_cache_filter(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<()> {
        Ok(())
    }

    /// The HTTP cache key (only called when the mode turned the cache on).
    fn cache_key_callback(&self, _session: &Session, _ctx: &mut Ctx) -> Result<CacheKey> {
        Err(Error::explain(
            ErrorType::InternalError,
            "this mode does not cache",
        ))
    }

    /// Whether the upstream's answer may be cached.
    fn response_cache_filter(
        &self,
        _session: &Session,
        _resp: &ResponseHeader,
        _ctx: &mut Ctx,
    ) -> Result<RespCacheable> {
        Ok(RespCacheable::Uncacheable(NoCacheReason::NeverEnabled))
    }

    /// The response header on its way to the client (from the upstream or the cache).
    async fn response_filter(
        &self,
        _session: &mut Session,
        _resp: &mut ResponseHeader,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        Ok(())
    }

    /// The upstream's response header.
    async fn upstream_response_filter(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()>;

    /// Each piece of the upstream's response body.
    fn upstream_response_body_filter(
        &self,
        _body: &mut Option<Bytes>,
        _end: bool,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        Ok(())
    }

    /// A connection to the upstream failed: decide whether to retry.
    fn fail_to_connect(&self, _ctx: &mut Ctx, e: Box<Error>) -> Box<Error> {
        e
    }

    /// The exchange with the upstream failed midway: decide whether to retry.
    fn error_while_proxy(
        &self,
        _session: &mut Session,
        mut e: Box<Error>,
        _ctx: &mut Ctx,
        _client_reused: bool,
    ) -> Box<Error> {
        e.set_retry(false);
        e
    }

    /// Answers a failure to the client if nothing was written yet; returns the status (0: none).
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> u16;

    /// After the response, with the status sent: the mode's own bookkeeping.
    async fn logging(&self, _ctx: &mut Ctx, _status: u16) {}
}

/// An S3 error as a Pingora error, remembered in the context so it is answered as S3 XML.
pub fn fail(ctx: &mut Ctx, e: S3Error) -> Box<Error> {
    let pe = Error::explain(ErrorType::Custom("s3"), e.to_string());
    ctx.failure = Some(e);
    pe
}
