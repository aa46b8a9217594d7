//! Prometheus metrics, registered once, and the `/metrics` listener.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::LazyLock;

use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use prometheus::{
    register_histogram_vec, register_int_counter_vec, Encoder, Histogram, HistogramVec, IntCounter,
    IntCounterVec, TextEncoder,
};

/// Requests by route, operation and status.
pub static REQUESTS: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    register_int_counter_vec!(
        "floe_requests_total",
        "S3 requests answered",
        &["route", "op", "status", "cache"]
    )
    .ok()
});

/// Request latency by operation.
pub static LATENCY: LazyLock<Option<HistogramVec>> = LazyLock::new(|| {
    register_histogram_vec!(
        "floe_request_duration_seconds",
        "Time from request head to the end of the response",
        &["op"],
        vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0
        ]
    )
    .ok()
});

/// Bytes received from origins, by origin.
pub static ORIGIN_BYTES: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    register_int_counter_vec!(
        "floe_origin_response_bytes_total",
        "Response body bytes read from origins",
        &["origin"]
    )
    .ok()
});

/// Origin transport failures and breaker refusals, by origin and kind.
pub static ORIGIN_FAILURES: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    register_int_counter_vec!(
        "floe_origin_failures_total",
        "Origin connection failures and breaker refusals",
        &["origin", "kind"]
    )
    .ok()
});

/// Fills' ranged GETs to origins with hedging on, by origin and hedge outcome: `none` (in
/// time), `refused` (late, budget spent), `won` or `lost` (hedged: whose answer was used). The
/// hedged share is (won + lost) / all.
pub static RANGE_READS: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    register_int_counter_vec!(
        "floe_origin_range_reads_total",
        "Ranged origin GETs of fills on origins that hedge, by hedge outcome",
        &["origin", "hedge"]
    )
    .ok()
});

/// Counts one hedged-origin ranged read.
pub fn range_read(origin: &str, outcome: crate::origin::hedge::Outcome) {
    if let Some(c) = RANGE_READS.as_ref() {
        c.with_label_values(&[origin, outcome.label()]).inc();
    }
}

/// One finished request, as metrics and traces see it.
pub struct Finished<'a> {
    /// x-amz-request-id.
    pub request_id: floe_core::RequestId,
    /// Route (bucket) label.
    pub route: &'a str,
    /// Origin name.
    pub origin: &'a str,
    /// S3 operation.
    pub op: &'static str,
    /// HTTP status.
    pub status: u16,
    /// Cache outcome: hit, miss, partial, pass.
    pub cache: &'static str,
    /// Duration.
    pub elapsed: std::time::Duration,
    /// Origin bytes read.
    pub origin_bytes: u64,
    /// Phases the stages timed.
    pub phases: &'a [floe_core::spans::Phase],
    /// The request's span in its trace.
    pub trace: Option<floe_core::trace::TraceParent>,
}

/// Most label sets a thread keeps resolved before it starts over (routes x ops x statuses x
/// cache outcomes stays far below this; reloads that rename routes add more).
const LOCAL_MAX: usize = 4096;

/// The request counter and latency histogram of each label set this thread has recorded,
/// resolved once: a request then records with one hash of its labels and no lock (a vec's
/// `with_label_values` hashes every label and takes the vec's read lock).
#[derive(Default)]
struct Local {
    hasher: RandomState,
    requests: HashMap<u64, (Box<str>, &'static str, u16, &'static str, IntCounter)>,
    latency: HashMap<&'static str, Histogram>,
}

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
}

impl Local {
    fn request(&mut self, f: &Finished<'_>) -> Option<&IntCounter> {
        let h = self.hasher.hash_one((f.route, f.op, f.status, f.cache));
        let known = matches!(self.requests.get(&h),
            Some((r, o, s, c, _)) if **r == *f.route && *o == f.op && *s == f.status && *c == f.cache);
        if !known {
            let code = http::StatusCode::from_u16(f.status);
            let label = code.as_ref().map_or("0", |c| c.as_str());
            let m = REQUESTS
                .as_ref()?
                .with_label_values(&[f.route, f.op, label, f.cache]);
            if self.requests.len() >= LOCAL_MAX {
                self.requests.clear();
            }
            let entry = (f.route.into(), f.op, f.status, f.cache, m);
            self.requests.insert(h, entry);
        }
        self.requests.get(&h).map(|e| &e.4)
    }

    fn latency(&mut self, op: &'static str) -> Option<&Histogram> {
        if !self.latency.contains_key(op) {
            let h = LATENCY.as_ref()?.with_label_values(&[op]);
            self.latency.insert(op, h);
        }
        self.latency.get(op)
    }
}

/// Records one finished request.
pub fn record(f: &Finished<'_>) {
    LOCAL.with_borrow_mut(|l| {
        if let Some(m) = l.request(f) {
            m.inc();
        }
        if let Some(h) = l.latency(f.op) {
            h.observe(f.elapsed.as_secs_f64());
        }
    });
    if f.origin_bytes > 0 {
        if let Some(m) = ORIGIN_BYTES.as_ref() {
            m.with_label_values(&[f.origin]).inc_by(f.origin_bytes);
        }
    }
}

/// Counts an origin failure of `kind` (connect, transfer, breaker_open, queue_full).
pub fn origin_failure(origin: &str, kind: &str) {
    if let Some(m) = ORIGIN_FAILURES.as_ref() {
        m.with_label_values(&[origin, kind]).inc();
    }
}

/// Serves the default registry in Prometheus text format.
pub struct MetricsApp;

#[async_trait::async_trait]
impl ServeHttp for MetricsApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let uri = &session.req_header().uri;
        let (path, query) = (uri.path().to_owned(), uri.query().unwrap_or("").to_owned());
        let headers = session.req_header().headers.clone();
        if let Some(r) = crate::ops::probes::answer(&path, &query, &headers).await {
            return r;
        }
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&prometheus::gather(), &mut buf);
        let mut resp = http::Response::new(buf);
        if let Ok(v) = http::HeaderValue::from_str(prometheus::TEXT_FORMAT) {
            resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        resp
    }
}
