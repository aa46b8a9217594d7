//! floe-control's OpenTelemetry export over OTLP/HTTP, on when `otlp_endpoint` names a
//! collector: one span per scheduler run (`sched.run`), a child of the trace its event carried
//! (the CloudEvents distributed-tracing extension, `traceparent`), whose context the worker
//! gets as `TRACEPARENT`. Exporters run on the SDK's own threads.

use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use floe_core::trace::TraceParent;
use opentelemetry::trace::{Span, SpanKind, Tracer, TracerProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

struct Otel {
    tracer: SdkTracer,
    _provider: SdkTracerProvider,
}

static OTEL: OnceLock<Otel> = OnceLock::new();

/// Starts the exporter toward `endpoint` (e.g. `http://collector:4318`). Call before the async
/// runtime starts: the HTTP exporter builds a blocking client.
pub fn init(endpoint: &str) -> anyhow::Result<()> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let resource = Resource::builder()
        .with_service_name("floe-control")
        .with_attributes([
            KeyValue::new("service.instance.id", host),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    let spans = SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .build()
        .context("building the OTLP span exporter")?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_id_generator(floe_core::trace::Preset::default())
        .with_resource(resource)
        .build();
    let _ = OTEL.set(Otel {
        tracer: provider.tracer("floe-control"),
        _provider: provider,
    });
    Ok(())
}

/// A run's place in its trace: a new span under the event's `traceparent` when exporting,
/// else the event's context passed on unchanged (or none).
pub fn run_trace(event: &str) -> Option<TraceParent> {
    let v: serde_json::Value = serde_json::from_str(event).ok()?;
    let incoming = v.get("traceparent").and_then(|t| t.as_str());
    if OTEL.get().is_some() {
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
    let Some(o) = OTEL.get() else { return };
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
