//! A run as an OpenTelemetry span (`sched.run`), when the process exports over OTLP
//! ([`floe_core::otlp`]): a child of the trace its event carried (the CloudEvents
//! distributed-tracing extension, `traceparent`), whose context the worker gets as
//! `TRACEPARENT`.

use std::time::{Duration, UNIX_EPOCH};

use floe_core::trace::TraceParent;
use opentelemetry::trace::Span;
use opentelemetry::trace::{SpanKind, Tracer};
use opentelemetry::KeyValue;

/// A run's place in its trace: a new span under the event's `traceparent` when exporting,
/// else the event's context passed on unchanged (or none).
pub fn run_trace(event: &str) -> Option<TraceParent> {
    let v: serde_json::Value = serde_json::from_str(event).ok()?;
    let incoming = v.get("traceparent").and_then(|t| t.as_str());
    if floe_core::otlp::get().is_some() {
        Some(TraceParent::child_of(incoming))
    } else {
        incoming.and_then(TraceParent::passed_on)
    }
}

/// What one run did, for its span.
pub struct RunSpan<'a> {
    /// Deployment.
    pub deployment: &'a str,
    /// Job id.
    pub job: &'a str,
    /// Attempt.
    pub attempt: i32,
    /// Lease generation.
    pub generation: i64,
    /// Result.
    pub result: &'a str,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Start and end, unix ms.
    pub start_ms: i64,
    /// End.
    pub end_ms: i64,
}

/// Exports a run's span under the ids `t` chose when it started; a no-op when export is off.
pub fn export_run(t: &TraceParent, r: &RunSpan<'_>) {
    let Some(o) = floe_core::otlp::get() else {
        return;
    };
    let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let builder = o
        .tracer
        .span_builder("sched.run")
        .with_kind(SpanKind::Consumer)
        .with_start_time(at(r.start_ms))
        .with_attributes([
            KeyValue::new("floe.deployment", r.deployment.to_owned()),
            KeyValue::new("floe.run.job", r.job.to_owned()),
            KeyValue::new("floe.run.attempt", i64::from(r.attempt)),
            KeyValue::new("floe.run.generation", r.generation),
            KeyValue::new("floe.run.result", r.result.to_owned()),
            KeyValue::new("process.exit.code", i64::from(r.exit_code.unwrap_or(-1))),
        ]);
    let mut span = floe_core::trace::start_span(&o.tracer, builder, t);
    span.end_with_timestamp(at(r.end_ms));
}
