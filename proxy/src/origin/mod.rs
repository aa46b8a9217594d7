//! An origin at run time: where it is, how requests to it are signed, how many may be in
//! flight, and whether it is considered down (circuit breaker).

pub mod embedded;
pub mod hedge;
pub mod parts;
pub mod reader;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use floe_filter::UpstreamPayload;
use pingora::http::RequestHeader;
use pingora::upstreams::peer::HttpPeer;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::file::Addressing;
use crate::config::settings::OriginSpec;

/// How long a request may wait for a slot under an origin's concurrency bound before it is
/// answered 503 SlowDown.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);

/// Why a request could not be signed for the origin.
#[derive(Debug, thiserror::Error)]
#[error("signing the origin request: {0}")]
pub struct SignError(String);

/// A consecutive-failure circuit breaker. Lock-free: two atomics.
pub struct Breaker {
    threshold: u32,
    open_for: Duration,
    failures: AtomicU32,
    /// Milliseconds since `epoch` until which the breaker is open.
    open_until_ms: AtomicU64,
    epoch: Instant,
}

impl Breaker {
    fn new(threshold: u32, open_ms: u64) -> Self {
        Self {
            threshold,
            open_for: Duration::from_millis(open_ms),
            failures: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether requests should be refused right now. After the open period one request at a
    /// time is let through as a trial.
    pub fn is_open(&self) -> bool {
        self.is_open_at(self.now_ms())
    }

    fn is_open_at(&self, now: u64) -> bool {
        let until = self.open_until_ms.load(Ordering::Relaxed);
        if until == 0 || now >= until {
            if until != 0 {
                // Half-open: the first caller claims the trial by pushing the deadline out.
                let next = now + self.open_for.as_millis() as u64;
                return self
                    .open_until_ms
                    .compare_exchange(until, next, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err();
            }
            return false;
        }
        true
    }

    /// Records a success: closes the breaker.
    pub fn success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.open_until_ms.store(0, Ordering::Relaxed);
    }

    /// Records a transport failure; opens the breaker at the threshold.
    pub fn failure(&self) {
        self.failure_at(self.now_ms());
    }

    fn failure_at(&self, now: u64) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.threshold {
            let until = now + self.open_for.as_millis() as u64;
            self.open_until_ms.store(until.max(1), Ordering::Relaxed);
        }
    }
}

/// A resolved origin.
pub struct Origin {
    /// Config name (metric label).
    pub name: String,
    tls: bool,
    /// host[:port] as the Host header carries it.
    host: String,
    /// host:port to connect to.
    connect: String,
    region: String,
    addressing: Addressing,
    identity: Option<Identity>,
    permits: Arc<Semaphore>,
    /// Retries on connection failures for idempotent requests.
    pub retries: usize,
    connect_timeout: Duration,
    read_timeout: Duration,
    /// The circuit breaker.
    pub breaker: Breaker,
    /// Hedged fills, when on.
    pub hedge: Option<crate::origin::hedge::Hedge>,
}

impl Origin {
    /// Builds an origin from its spec and its endpoint URL.
    pub fn new(spec: &OriginSpec, endpoint: &url::Url) -> Self {
        let tls = endpoint.scheme() == "https";
        let host_name = endpoint.host_str().unwrap_or("localhost").to_owned();
        let port = endpoint
            .port_or_known_default()
            .unwrap_or(if tls { 443 } else { 80 });
        let host = match endpoint.port() {
            Some(p) => format!("{host_name}:{p}"),
            None => host_name.clone(),
        };
        let identity = spec.credentials.as_ref().map(|(ak, sk)| {
            Identity::from(Credentials::new(
                ak.clone(),
                sk.clone(),
                None,
                None,
                "floe-config",
            ))
        });
        Self {
            name: spec.name.clone(),
            tls,
            host,
            connect: format!("{host_name}:{port}"),
            region: spec.region.clone(),
            addressing: spec.addressing,
            identity,
            permits: Arc::new(Semaphore::new(spec.max_concurrency)),
            retries: spec.retries,
            connect_timeout: Duration::from_millis(spec.connect_timeout_ms),
            read_timeout: Duration::from_millis(spec.read_timeout_ms),
            breaker: Breaker::new(spec.breaker_failures, spec.breaker_open_ms),
            hedge: spec.hedge.map(crate::origin::hedge::Hedge::new),
        }
    }

    /// Waits for a slot under the concurrency bound (at most `wait`).
    pub async fn acquire(&self, wait: Duration) -> Option<OwnedSemaphorePermit> {
        tokio::time::timeout(wait, self.permits.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// The Pingora peer for a request to `bucket`.
    pub fn peer(&self, bucket: &str) -> HttpPeer {
        let sni = match self.addressing {
            Addressing::Path => self.host_only().to_owned(),
            Addressing::Virtual => format!("{bucket}.{}", self.host_only()),
        };
        let mut peer = HttpPeer::new(self.connect.as_str(), self.tls, sni);
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.read_timeout = Some(self.read_timeout);
        // A write the origin stops taking (a silent connection) fails as a read would, so an
        // upload never hangs on it (write-back's propagation waits for its uploads).
        peer.options.write_timeout = Some(self.read_timeout);
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        peer
    }

    fn host_only(&self) -> &str {
        self.host.split(':').next().unwrap_or(&self.host)
    }

    /// Rewrites `req` (already holding the client's headers) into the origin request for
    /// `bucket` and the raw (still encoded) key path and query, then signs it.
    pub fn prepare(
        &self,
        req: &mut RequestHeader,
        bucket: &str,
        raw_key: &str,
        query: &str,
        payload: &UpstreamPayload,
    ) -> Result<(), SignError> {
        let (host, path) = match self.addressing {
            // The service itself (ListBuckets).
            _ if bucket.is_empty() => (self.host.clone(), "/".to_owned()),
            Addressing::Path if raw_key.is_empty() => (self.host.clone(), format!("/{bucket}")),
            Addressing::Path => (self.host.clone(), format!("/{bucket}/{raw_key}")),
            Addressing::Virtual => (format!("{bucket}.{}", self.host), format!("/{raw_key}")),
        };
        let path_q = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        let uri: http::Uri = path_q.parse().map_err(|e| SignError(format!("{e}")))?;
        req.set_uri(uri);
        for h in [
            "authorization",
            "x-amz-date",
            "x-amz-content-sha256",
            "x-amz-security-token",
            "host",
        ] {
            req.remove_header(h);
        }
        req.insert_header("host", &host)
            .map_err(|e| SignError(e.to_string()))?;
        if let UpstreamPayload::Decoded { length } = payload {
            // The plain body goes on: its framing and trailer (checked here) stay behind.
            req.remove_header("x-amz-decoded-content-length");
            req.remove_header("x-amz-trailer");
            strip_aws_chunked(req);
            req.insert_header("content-length", length.to_string())
                .map_err(|e| SignError(e.to_string()))?;
        }
        let Some(identity) = &self.identity else {
            return Ok(());
        };
        self.sign(
            req,
            identity,
            &format!(
                "{}://{host}{path_q}",
                if self.tls { "https" } else { "http" }
            ),
            payload,
        )
    }

    fn sign(
        &self,
        req: &mut RequestHeader,
        identity: &Identity,
        url: &str,
        payload: &UpstreamPayload,
    ) -> Result<(), SignError> {
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| SignError(e.to_string()))?
            .into();
        let body = match payload {
            UpstreamPayload::Unsigned | UpstreamPayload::Decoded { .. } => {
                SignableBody::UnsignedPayload
            }
            UpstreamPayload::Sha256(h) => SignableBody::Precomputed(h.clone()),
            UpstreamPayload::UnsignedTrailer => SignableBody::StreamingUnsignedPayloadTrailer,
        };
        // Sign what reaches the origin unchanged: host, content-md5/type and x-amz-* headers.
        let signed: Vec<(&str, &str)> = req
            .headers
            .iter()
            .filter(|(k, _)| {
                let k = k.as_str();
                k == "host" || k == "content-md5" || k == "content-type" || k.starts_with("x-amz-")
            })
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
            .collect();
        let signable = SignableRequest::new(req.method.as_str(), url, signed.into_iter(), body)
            .map_err(|e| SignError(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| SignError(e.to_string()))?
            .into_parts();
        let (headers, _) = instructions.into_parts();
        for h in headers {
            req.insert_header(h.name().to_owned(), h.value())
                .map_err(|e| SignError(e.to_string()))?;
        }
        Ok(())
    }
}

/// Removes `aws-chunked` from Content-Encoding (dropping the header if nothing is left).
fn strip_aws_chunked(req: &mut RequestHeader) {
    let Some(v) = req
        .headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    let rest: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.eq_ignore_ascii_case("aws-chunked") && !e.is_empty())
        .collect();
    if rest.is_empty() {
        req.remove_header("content-encoding");
    } else {
        let joined = rest.join(",");
        let _ = req.insert_header("content-encoding", joined);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaker_opens_and_half_opens() {
        let b = Breaker::new(2, 50);
        assert!(!b.is_open_at(10));
        b.failure_at(10);
        assert!(!b.is_open_at(10));
        b.failure_at(10);
        assert!(b.is_open_at(11));
        assert!(b.is_open_at(59));
        assert!(
            !b.is_open_at(60),
            "first caller after the open period gets the trial"
        );
        assert!(b.is_open_at(61), "the others keep getting refused");
        b.failure_at(61);
        assert!(b.is_open_at(100), "a failed trial re-opens");
        b.success();
        assert!(!b.is_open_at(101));
    }
}
