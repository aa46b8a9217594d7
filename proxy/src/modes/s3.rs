//! The S3 mode: a request on a route runs the route's filter chain, then goes to the origin
//! re-signed, with retries, a concurrency bound and a circuit breaker.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::copy_source::CopySource;
use floe_core::uri::{decode_strict, uri_encode};
use floe_core::{BucketName, ObjectKey, S3Error, S3ErrorCode, S3Op};
use floe_filter::FilterCtx;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::Session;

use crate::modes::respond;
use crate::modes::{fail, Ctx, Mode};
use crate::ops::metrics;
use crate::origin::QUEUE_WAIT;
use crate::routes::{Route, RouteTable};

/// S3 requests on the route table.
pub struct S3Mode {
    /// The route table; a reload swaps in a new one (requests under way keep their route).
    table: Arc<arc_swap::ArcSwap<RouteTable>>,
}

impl S3Mode {
    /// The mode over a route table.
    pub fn new(table: Arc<arc_swap::ArcSwap<RouteTable>>) -> Self {
        Self { table }
    }

    /// Routes, verifies and runs the filter chain; `Ok(true)`: the answer is written.
    pub async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        match self.admit(session, ctx).await {
            Ok(done) => Ok(done),
            Err(e) if respond::answered(session) => {
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

    /// Routes, verifies and filters; `Ok(true)` means a response was already written.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool, S3Error> {
        let req = session.req_header();
        let host = req.headers.get("host").and_then(|v| v.to_str().ok());
        let table = self.table.load();
        let addressed = table.address(host, req.uri.path());
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
        if !bucket.is_empty() {
            // S3's own answer to a name it would never create, on any route or none.
            BucketName::check(&bucket).map_err(|e| {
                S3Error::new(
                    S3ErrorCode::InvalidBucketName,
                    "The specified bucket is not valid.",
                )
                .caused_by(e)
            })?;
        }
        let route = table.get(&bucket).map_err(|e| {
            S3Error::new(
                S3ErrorCode::InternalError,
                "The bucket's route could not be built.",
            )
            .caused_by(std::io::Error::other(e.to_string()))
        })?;
        let Some(route) = route else {
            // Held across awaits: an owned table, not the load guard.
            let table = arc_swap::Guard::into_inner(table);
            let mut scratch = FilterCtx::new(ctx.f.op);
            table
                .any_client
                .request_filter(session, &mut scratch)
                .await?;
            if ctx.f.op == S3Op::ListBuckets {
                let key = scratch.access_key.unwrap_or_default();
                let buckets = table.listed_buckets(&key).await.map_err(|e| {
                    S3Error::new(
                        S3ErrorCode::ServiceUnavailable,
                        "The origin could not list its buckets. Please try again.",
                    )
                    .caused_by(std::io::Error::other(e))
                })?;
                ctx.status = respond::list_buckets(session, ctx.f.request_id, &buckets, &key)
                    .await
                    .map_err(S3Error::internal)?;
                return Ok(true);
            }
            return Err(S3Error::new(
                S3ErrorCode::NoSuchBucket,
                "The specified bucket does not exist",
            ));
        };
        ctx.f.bucket = Some(route.bucket.clone());
        if !ctx.raw_key.is_empty() {
            let decoded = decode_strict(&ctx.raw_key).ok_or_else(|| {
                S3Error::new(S3ErrorCode::InvalidURI, "Couldn't parse the specified URI.")
            })?;
            let key = ObjectKey::parse(&decoded)
                .map_err(|e| S3Error::new(S3ErrorCode::InvalidArgument, e.to_string()))?;
            // Forwarded in the one encoding the origin's verifier rebuilds from the key it
            // decodes (`%3f`, `%41` as sent would fail its signature check).
            ctx.raw_key = uri_encode(key.as_str(), true);
            ctx.f.key = Some(key);
        }
        ctx.route = Some(route.clone());
        if copy {
            // Before any stage: one may answer the copy itself (write-back stages a part
            // copy). The key is the one the request claims; the sigv4 stage then verifies
            // that this key signed it.
            let claimed = claimed_access_key(session.req_header());
            check_copy_source(&table, session.req_header(), &route, claimed.as_deref())?;
        }
        for filter in &route.filters {
            if filter.request_filter(session, &mut ctx.f).await? {
                ctx.f.answered_by = Some(filter.name());
                return Ok(true);
            }
        }
        if ctx.f.op == S3Op::Unsupported {
            return Err(S3Error::new(
                S3ErrorCode::NotImplemented,
                "Floe does not carry this operation",
            ));
        }
        if ctx.f.op.is_bucket_admin() && !route.bucket_operations {
            return Err(S3Error::new(
                S3ErrorCode::NotImplemented,
                "This route does not carry bucket operations (bucket_operations: false)",
            ));
        }
        if route.origin.breaker.is_open() {
            metrics::origin_failure(&route.origin.name, "breaker_open");
            return Err(S3Error::new(
                S3ErrorCode::SlowDown,
                "The origin is unavailable; please reduce your request rate and retry.",
            ));
        }
        if ctx.f.op == S3Op::PostObject {
            ctx.status = crate::modes::post::forward(session, ctx, &route).await?;
            return Ok(true);
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

/// The access key a request says signed it (header or presigned query), unverified.
fn claimed_access_key(req: &RequestHeader) -> Option<String> {
    let authz = req
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let params = match authz {
        Some(a) => floe_sigv4::auth::parse_header(a, Some("")).ok(),
        None => floe_sigv4::auth::parse_query(req.uri.query().unwrap_or(""))
            .ok()
            .flatten(),
    };
    params.map(|p| p.access_key)
}

/// CopyObject and UploadPartCopy read their source at the origin, with Floe's credentials: a
/// source in another bucket must be one Floe routes to the same origin for this client.
fn check_copy_source(
    table: &RouteTable,
    req: &RequestHeader,
    route: &Route,
    access_key: Option<&str>,
) -> Result<(), S3Error> {
    let header = req.headers.get("x-amz-copy-source");
    let source = CopySource::parse(header.and_then(|v| v.to_str().ok()).unwrap_or(""))?;
    if source.bucket == route.bucket {
        return Ok(());
    }
    let denied = |why: &str| {
        S3Error::new(
            S3ErrorCode::AccessDenied,
            format!("x-amz-copy-source: {why}"),
        )
    };
    let source_route = table
        .get(source.bucket.as_str())
        .ok()
        .flatten()
        .ok_or_else(|| denied("Floe routes no such bucket"))?;
    if !access_key.is_some_and(|k| source_route.clients.contains(k)) {
        return Err(denied(
            "the source bucket's route does not accept this access key",
        ));
    }
    if source_route.origin.name != route.origin.name {
        return Err(S3Error::new(
            S3ErrorCode::NotImplemented,
            "Floe copies only between buckets of one origin",
        ));
    }
    Ok(())
}

#[async_trait]
impl Mode for S3Mode {
    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let Some(route) = ctx.route.clone() else {
            return Err(Error::explain(ErrorType::InternalError, "no route"));
        };
        for filter in &route.filters {
            match filter.upstream_peer(session, &mut ctx.f).await {
                Ok(Some(peer)) => return Ok(peer),
                Ok(None) => {}
                Err(e) => return Err(fail(ctx, e)),
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
                return Err(fail(ctx, e));
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
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let staged = ctx.f.body_stage.is_some();
        if let Some(stage) = ctx.f.body_stage.as_mut() {
            if let Err(e) = stage.feed(body, end) {
                return Err(fail(ctx, e));
            }
        }
        // Disjoint borrows of the route and the filter context: no Arc clone per body piece.
        let mut failed = None;
        if let Some(route) = &ctx.route {
            for filter in &route.filters {
                if let Err(e) = filter.request_body_filter(body, end, &mut ctx.f).await {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            return Err(fail(ctx, e));
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

    async fn upstream_response_filter(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let mut failed = None;
        if let Some(route) = &ctx.route {
            route.origin.breaker.success();
            // A bucket made or removed shows in the next ListBuckets, even one sent the
            // moment this answer arrives.
            let made = matches!(ctx.f.op, S3Op::CreateBucket | S3Op::DeleteBucket);
            if made && resp.status.is_success() {
                self.table.load().origin_buckets.forget(&route.origin.name);
            }
            for filter in &route.filters {
                if let Err(e) = filter.upstream_response_filter(resp, &mut ctx.f).await {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            return Err(fail(ctx, e));
        }
        resp.insert_header("x-floe-request-id", ctx.f.request_id.to_string())?;
        resp.insert_header("x-floe-cache", "pass")?;
        ctx.status = resp.status.as_u16();
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(route) = &ctx.route {
            for filter in &route.filters {
                if let Err(e) = filter.upstream_response_body_filter(body, end, &mut ctx.f) {
                    return Err(fail(ctx, e));
                }
            }
        }
        Ok(())
    }

    fn fail_to_connect(&self, ctx: &mut Ctx, mut e: Box<Error>) -> Box<Error> {
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
        session: &mut Session,
        mut e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
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

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> u16 {
        let err = ctx.failure.clone().unwrap_or_else(|| match e.esource() {
            // The client's framing is broken (a bad chunk size, a chunk longer than it said):
            // its fault, answered as S3 answers a malformed request.
            ErrorSource::Downstream if *e.etype() == ErrorType::new("InvalidChunk") => {
                S3Error::new(
                    S3ErrorCode::InvalidRequest,
                    "The request body's chunked transfer encoding is malformed.",
                )
            }
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
        let code = if downstream_dead || respond::answered(session) {
            0
        } else {
            respond::error(session, ctx.f.request_id, &err, true)
                .await
                .unwrap_or(0)
        };
        ctx.failure = Some(err);
        code
    }

    async fn logging(&self, ctx: &mut Ctx, status: u16) {
        if let Some(r) = &ctx.route {
            for f in &r.filters {
                f.logging(&ctx.f, status);
            }
            // A bucket made or removed through Floe shows in its next ListBuckets.
            let made = matches!(ctx.f.op, S3Op::CreateBucket | S3Op::DeleteBucket);
            if made && (200..300).contains(&status) {
                self.table.load().origin_buckets.forget(&r.origin.name);
            }
        }
        ctx.permit = None;
    }
}
