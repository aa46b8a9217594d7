//! OpenTelemetry export over OTLP/HTTP, on when `server.otlp_endpoint` names a collector: one
//! span per S3 request (built at the end of the request from its recorded start, so nothing is
//! held across awaits) with the phases its stages timed as children, background phases
//! ([`floe_core::spans::emit`]) as spans of their own, and the request counters and latency
//! histogram as OTel metrics.
//! Exporters run on the SDK's own threads; the request path only enqueues.
//!
//! Trace context: each request's span has the id chosen when the request arrived
//! ([`request_span`]; a child of the client's `traceparent`), so the origin and peer requests
//! that carried that id as their parent hang under it ([`floe_core::trace::start_span`]).

use std::sync::OnceLock;
use std::time::SystemTime;

use floe_core::spans::Phase;
use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SdkTracer;

use crate::ops::metrics::Finished;

struct Otel {
    tracer: &'static SdkTracer,
    requests: Counter<u64>,
    duration: Histogram<f64>,
    origin_bytes: Counter<u64>,
}

static OTEL: OnceLock<Otel> = OnceLock::new();

/// Whether OTLP export is on.
pub fn enabled() -> bool {
    OTEL.get().is_some()
}

/// A request's span: a new child of the client's `traceparent` when exporting (a new trace
/// without one); else the client's own context passed on unchanged, or none.
pub fn request_span(incoming: Option<&str>) -> Option<floe_core::trace::TraceParent> {
    use floe_core::trace::TraceParent;
    if enabled() {
        Some(TraceParent::child_of(incoming))
    } else {
        incoming.and_then(TraceParent::passed_on)
    }
}

/// Starts the exporters toward `endpoint` (e.g. `http://collector:4318`) through
/// [`floe_core::otlp::init`]. Call before any async runtime starts.
pub fn init(endpoint: &str, node_id: &str) -> Result<(), floe_core::otlp::OtlpError> {
    let exporters = floe_core::otlp::init(
        endpoint,
        "floe-proxy",
        vec![
            KeyValue::new("service.instance.id", node_id.to_owned()),
            KeyValue::new("floe.node_id", node_id.to_owned()),
        ],
    )?;
    let meter = &exporters.meter;
    let otel = Otel {
        tracer: &exporters.tracer,
        requests: meter
            .u64_counter("floe.requests")
            .with_description("S3 requests answered")
            .build(),
        duration: meter
            .f64_histogram("floe.request.duration")
            .with_unit("s")
            .build(),
        origin_bytes: meter
            .u64_counter("floe.origin.response_bytes")
            .with_unit("By")
            .build(),
    };
    let _ = OTEL.set(otel);
    floe_core::spans::set_sink(|p| {
        if let Some(o) = OTEL.get() {
            phase_span(o.tracer, &p, &opentelemetry::Context::new());
        }
    });
    Ok(())
}

/// Exports one request as a span and metric points; a no-op when OTLP is off.
pub fn record(r: &Finished<'_>) {
    let Some(o) = OTEL.get() else { return };
    let attrs = [
        KeyValue::new("floe.route", r.route.to_owned()),
        KeyValue::new("s3.operation", r.op),
        KeyValue::new("http.response.status_code", i64::from(r.status)),
        KeyValue::new("floe.cache", r.cache),
    ];
    o.requests.add(1, &attrs);
    o.duration.record(r.elapsed.as_secs_f64(), &attrs);
    o.origin_bytes.add(r.origin_bytes, &attrs[..1]);
    let start = SystemTime::now()
        .checked_sub(r.elapsed)
        .unwrap_or_else(SystemTime::now);
    let builder = o
        .tracer
        .span_builder(r.op)
        .with_kind(SpanKind::Server)
        .with_start_time(start)
        .with_attributes(attrs.into_iter().chain([
            KeyValue::new("floe.request_id", r.request_id.to_string()),
            KeyValue::new("floe.origin_bytes", r.origin_bytes as i64),
        ]));
    let mut span = match &r.trace {
        Some(t) => floe_core::trace::start_span(o.tracer, builder, t),
        None => builder.start(o.tracer),
    };
    if !r.phases.is_empty() {
        let parent =
            opentelemetry::Context::new().with_remote_span_context(span.span_context().clone());
        for p in r.phases {
            phase_span(o.tracer, p, &parent);
        }
    }
    span.end();
}

/// Exports `p` as a span under `parent` (an empty context: a span of its own).
fn phase_span(tracer: &SdkTracer, p: &Phase, parent: &opentelemetry::Context) {
    let attrs: Vec<KeyValue> = p
        .attrs
        .iter()
        .map(|(k, v)| KeyValue::new(*k, v.clone()))
        .collect();
    let mut span = tracer
        .span_builder(p.name)
        .with_kind(SpanKind::Internal)
        .with_start_time(p.start)
        .with_attributes(attrs)
        .start_with_context(tracer, parent);
    span.end_with_timestamp(p.start + p.took);
}
