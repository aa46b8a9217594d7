//! The filter-stage contract: each concern (SigV4, block cache, ring, write-back) is a
//! [`RequestFilter`] built once from a route's config and run in order for every request.

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;

use floe_core::{BucketName, ObjectKey, RequestId, S3Error, S3Op};

/// How the proxy signs the body it forwards to the origin.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UpstreamPayload {
    /// No body, or a body whose integrity was not signed: `UNSIGNED-PAYLOAD`.
    #[default]
    Unsigned,
    /// The client's hex SHA-256 of the body: forwarded, so the origin checks it too.
    Sha256(String),
    /// The body is forwarded as sent, `aws-chunked` with unsigned chunks and a checksum
    /// trailer (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
    UnsignedTrailer,
    /// Signed `aws-chunked` framing was stripped: the origin gets the plain body of `length`
    /// bytes.
    Decoded {
        /// The decoded body length (x-amz-decoded-content-length).
        length: u64,
    },
}

/// A transformation or check over the request body as it streams to the origin.
///
/// Contract: `feed` is called for every piece of the body in order, and exactly once with
/// `end_of_stream == true`. It may replace `body` (with fewer, more, or no bytes). An error
/// aborts the request before the offending bytes are forwarded.
pub trait BodyStage: Send + Sync {
    /// Inspects and possibly rewrites one piece of the body.
    fn feed(&mut self, body: &mut Option<Bytes>, end_of_stream: bool) -> Result<(), S3Error>;

    /// A fresh stage in the initial state, for verifying a pre-read body twice.
    fn fresh(&self) -> Box<dyn BodyStage>;

    /// Asks the stage, before its first `feed`, to emit the plain object bytes (a stage that
    /// consumes the body itself, like write-back staging, needs them); `true` when its output
    /// is now the plain body. Checks still run: a bad trailer checksum still fails the last
    /// `feed`. Default: `false` (the output may keep a framing).
    fn plain(&mut self) -> bool {
        false
    }
}

/// Per-request state shared by filters and the proxy.
pub struct FilterCtx {
    /// This request's id (x-amz-request-id).
    pub request_id: RequestId,
    /// The S3 operation.
    pub op: S3Op,
    /// The addressed bucket, when the request names one.
    pub bucket: Option<BucketName>,
    /// The addressed key (percent-decoded), when the request names one.
    pub key: Option<ObjectKey>,
    /// The access key the request was signed with, once verified.
    pub access_key: Option<String>,
    /// How to sign the forwarded body.
    pub payload: UpstreamPayload,
    /// The body check or transformation, if any.
    pub body_stage: Option<Box<dyn BodyStage>>,
    /// The whole body was read and verified before the origin was contacted (so an
    /// `Expect: 100-continue` was already answered).
    pub body_preread: bool,
    /// Where the response's bytes came from, when a cache stage looked at the request.
    pub cache: Option<CacheOutcome>,
    /// Origin bytes spent by filter stages that answered themselves.
    pub origin_bytes: u64,
    /// The stage that answered the request itself (`None`: the origin answered it). A write a
    /// stage answered (write-back's staged PUT) has not reached the origin yet.
    pub answered_by: Option<&'static str>,
    /// Timed phases of the request, exported as its span's children (empty, and
    /// allocation-free, unless a stage records one).
    pub phases: Vec<floe_core::spans::Phase>,
    /// This request's span in its trace (set when OTLP export is on or the client sent a
    /// `traceparent`); the requests Floe makes for it name it as their parent.
    pub trace: Option<floe_core::trace::TraceParent>,
    /// Per-request state of the stages, one value per type (a stage keys it by a type of its
    /// own). Empty, and allocation-free, for stages that keep none.
    pub ext: http::Extensions,
}

/// Where a response's bytes came from: what `x-floe-cache` says, the access log logs and the
/// request metrics are labelled by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheOutcome {
    /// Every byte from this node's cache.
    Hit,
    /// From the block's owner in the fleet, which held it.
    HitPeer,
    /// From the block's owner in the fleet, which filled it from the origin.
    FillPeer,
    /// From another read's fill of the same blocks (no origin bytes of its own).
    Wait,
    /// Some bytes from the cache, the rest from the origin.
    Partial,
    /// From the origin, through the cache.
    Miss,
    /// Not the cache's to serve: passed to the origin as it is.
    Pass,
    /// A staged write (write-back) answered it.
    Writeback,
}

impl CacheOutcome {
    /// The label (`hit`, `hit-peer`, `fill-peer`, `wait`, `partial`, `miss`, `pass`,
    /// `writeback`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::HitPeer => "hit-peer",
            Self::FillPeer => "fill-peer",
            Self::Wait => "wait",
            Self::Partial => "partial",
            Self::Miss => "miss",
            Self::Pass => "pass",
            Self::Writeback => "writeback",
        }
    }
}

impl FilterCtx {
    /// A context for a new request.
    pub fn new(op: S3Op) -> Self {
        Self {
            request_id: RequestId::next(),
            op,
            bucket: None,
            key: None,
            access_key: None,
            payload: UpstreamPayload::Unsigned,
            body_stage: None,
            body_preread: false,
            cache: None,
            origin_bytes: 0,
            answered_by: None,
            phases: Vec::new(),
            trace: None,
            ext: http::Extensions::new(),
        }
    }
}

/// One filter stage, built once from a route's config and shared by every request on it.
///
/// The proxy runs a route's stages in the order the route lists them, hook by hook, the way
/// Pingora runs a `ProxyHttp`'s phases. Every hook but [`RequestFilter::name`] has a no-op
/// default, so a stage implements only the phases it cares about. Per-request state a stage
/// needs between hooks goes in [`FilterCtx::ext`] under a type of its own.
///
/// Contract: hooks must not block the async thread (CPU-heavy work goes to a blocking pool).
/// An `Err` from a hook that runs before the response started is answered to the client as an
/// S3 XML error; after that, the connection is dropped so a client never takes a short body
/// for a whole one.
#[async_trait]
pub trait RequestFilter: Send + Sync {
    /// The stage's name, as routes list it in YAML.
    fn name(&self) -> &'static str;

    /// Runs after routing, before anything reaches the origin. `Ok(false)` passes the request
    /// on to the next stage; `Ok(true)` means this stage wrote the whole response and the chain
    /// stops (the origin is never contacted); `Err` is answered as an S3 error. A stage that
    /// consumes the request body itself (write-back staging a PUT) reads it here with
    /// `session.read_request_body()` and answers `Ok(true)`.
    async fn request_filter(
        &self,
        _session: &mut Session,
        _ctx: &mut FilterCtx,
    ) -> Result<bool, S3Error> {
        Ok(false)
    }

    /// Runs when every stage passed the request on and it is about to go upstream (again on
    /// each retry). `Some(peer)` sends it to that peer instead of the route's origin; the first
    /// stage that answers `Some` wins. The fleet sends a block fetch to the owning node here.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut FilterCtx,
    ) -> Result<Option<Box<HttpPeer>>, S3Error> {
        Ok(None)
    }

    /// Runs for every piece of the request body as it streams upstream, in order, and once
    /// with `end_of_stream == true`. May rewrite `body`. An `Err` aborts the upstream request
    /// before these bytes are forwarded.
    async fn request_body_filter(
        &self,
        _body: &mut Option<Bytes>,
        _end_of_stream: bool,
        _ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        Ok(())
    }

    /// Runs when the upstream's response header arrives, before it is sent to the client: what
    /// must hold before the client learns the outcome (the fleet told of a write) is done here.
    async fn upstream_response_filter(
        &self,
        _resp: &mut ResponseHeader,
        _ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        Ok(())
    }

    /// Runs for every piece of the upstream's response body before it is sent to the client.
    fn upstream_response_body_filter(
        &self,
        _body: &mut Option<Bytes>,
        _end_of_stream: bool,
        _ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        Ok(())
    }

    /// Runs once the response is done (answered by a stage, proxied, or failed), with the
    /// status sent (0 when none could be). Record metrics here.
    fn logging(&self, _ctx: &FilterCtx, _status: u16) {}
}
