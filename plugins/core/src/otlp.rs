//! OpenTelemetry export over OTLP/HTTP, set up once per process for both binaries: a span
//! exporter (batched, with Floe's preset span ids, [`crate::trace::Preset`]) and a metric
//! reader every [`export_interval`], both toward one collector, under one resource. Exporters
//! run on the SDK's own threads. What each binary exports (the proxy's request spans, the
//! control plane's run spans and metric bridge) is its own; this holds only the providers.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::trace::TracerProvider;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// An exporter that could not be built (a malformed endpoint).
#[derive(Debug, thiserror::Error)]
#[error("building the OTLP {what} exporter for {endpoint}: {reason}")]
pub struct OtlpError {
    /// `span` or `metric`.
    pub what: &'static str,
    /// The collector's endpoint as configured.
    pub endpoint: String,
    /// The SDK's reason.
    pub reason: String,
}

/// The process's exporters, once [`init`] ran.
pub struct Exporters {
    /// Spans go through this tracer (named after the service).
    pub tracer: SdkTracer,
    /// Instruments are made from this meter (named after the service).
    pub meter: Meter,
    _traces: SdkTracerProvider,
    _metrics: SdkMeterProvider,
}

static EXPORTERS: OnceLock<Exporters> = OnceLock::new();

/// The exporters, when OTLP is on.
pub fn get() -> Option<&'static Exporters> {
    EXPORTERS.get()
}

/// How often metrics are exported: `OTEL_METRIC_EXPORT_INTERVAL` ms (the SDK's variable), else
/// 10 s, a scrape interval's worth (the SDK's own default, 60 s, is coarser than Prometheus's).
pub fn export_interval() -> Duration {
    let ms = std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Duration::from_millis(ms)
}

/// Starts the exporters toward `endpoint` (e.g. `http://collector:4318`) for `service`
/// (`floe-proxy`, `floe-control`), with `attributes` beside the service's name and version on
/// the resource. Call before any async runtime starts: the HTTP exporters build a blocking
/// client. A second call keeps the first exporters.
pub fn init(
    endpoint: &str,
    service: &'static str,
    attributes: Vec<KeyValue>,
) -> Result<&'static Exporters, OtlpError> {
    let base = endpoint.trim_end_matches('/');
    let failed = |what, e: &dyn std::fmt::Display| OtlpError {
        what,
        endpoint: endpoint.to_owned(),
        reason: e.to_string(),
    };
    let mut all = attributes;
    all.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    let resource = Resource::builder()
        .with_service_name(service)
        .with_attributes(all)
        .build();
    let spans = SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{base}/v1/traces"))
        .build()
        .map_err(|e| failed("span", &e))?;
    let traces = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_id_generator(crate::trace::Preset::default())
        .with_resource(resource.clone())
        .build();
    let metric_exporter = MetricExporter::builder()
        .with_http()
        .with_endpoint(format!("{base}/v1/metrics"))
        .build()
        .map_err(|e| failed("metric", &e))?;
    let reader = PeriodicReader::builder(metric_exporter)
        .with_interval(export_interval())
        .build();
    let metrics = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    let exporters = Exporters {
        tracer: traces.tracer(service),
        meter: metrics.meter(service),
        _traces: traces,
        _metrics: metrics,
    };
    Ok(EXPORTERS.get_or_init(|| exporters))
}
