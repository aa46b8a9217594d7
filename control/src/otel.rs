//! floe-control's OpenTelemetry export over OTLP/HTTP, on when `otlp_endpoint` names a
//! collector: one span per scheduler run (`sched.run`), a child of the trace its event carried
//! (the CloudEvents distributed-tracing extension, `traceparent`), whose context the worker
//! gets as `TRACEPARENT`; and every metric `GET /metrics` serves ([`bridge`]). Exporters run on
//! the SDK's own threads.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use arc_swap::ArcSwap;
use floe_core::trace::TraceParent;
use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider};
use opentelemetry::trace::{Span, SpanKind, Tracer, TracerProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use prometheus::proto::{Metric, MetricFamily, MetricType};

use crate::state::Control;
use crate::worker::{self, Activity, Handle, Shutdown};

struct Otel {
    tracer: SdkTracer,
    meter: Meter,
    _provider: SdkTracerProvider,
    _metrics: SdkMeterProvider,
}

static OTEL: OnceLock<Otel> = OnceLock::new();

/// How often metrics are exported: `OTEL_METRIC_EXPORT_INTERVAL` ms, else 10 s (a scrape
/// interval's worth; the SDK's own default, 60 s, is coarser than Prometheus's).
fn export_interval() -> Duration {
    let ms = std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Duration::from_millis(ms)
}

/// Starts the exporters toward `endpoint` (e.g. `http://collector:4318`). Call before the async
/// runtime starts: the HTTP exporters build a blocking client.
pub fn init(endpoint: &str) -> anyhow::Result<()> {
    let base = endpoint.trim_end_matches('/');
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
        .with_endpoint(format!("{base}/v1/traces"))
        .build()
        .context("building the OTLP span exporter")?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_id_generator(floe_core::trace::Preset::default())
        .with_resource(resource.clone())
        .build();
    let exporter = MetricExporter::builder()
        .with_http()
        .with_endpoint(format!("{base}/v1/metrics"))
        .build()
        .context("building the OTLP metric exporter")?;
    let reader = PeriodicReader::builder(exporter)
        .with_interval(export_interval())
        .build();
    let metrics = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    let _ = OTEL.set(Otel {
        tracer: provider.tracer("floe-control"),
        meter: metrics.meter("floe-control"),
        _provider: provider,
        _metrics: metrics,
    });
    Ok(())
}

/// The families last gathered, by name: what the instruments' callbacks report.
type Snapshot = Arc<ArcSwap<HashMap<String, MetricFamily>>>;

/// The `otel-metrics` worker: every export interval it gathers the families `GET /metrics`
/// serves (async: the queue's depth is read from its store) into a snapshot that the SDK's
/// observable instruments report when it collects, so OTLP and Prometheus carry the same
/// metrics under the same names (values up to one interval apart). A family seen for the first
/// time gets its instrument then. Counters become OTel counters (named without `_total`, which
/// Prometheus exporters add back), gauges gauges, histograms their `_count` and `_sum` counters
/// (the SDK takes no pre-bucketed histogram). Stops at once when OTLP is off.
pub async fn bridge(ctl: Arc<Control>, h: Handle, mut stop: Shutdown) {
    let Some(meter) = OTEL.get().map(|o| o.meter.clone()) else {
        h.set(Activity::Stopped, "OTLP export is off");
        return;
    };
    let snap = Snapshot::default();
    let mut known = HashSet::new();
    loop {
        h.set(Activity::Working, "gathering");
        let families = crate::api::families(&ctl).await;
        for f in &families {
            if known.insert(f.name().to_owned()) {
                register(&meter, f, &snap);
            }
        }
        let by_name = families
            .into_iter()
            .map(|f| (f.name().to_owned(), f))
            .collect();
        snap.store(Arc::new(by_name));
        h.done();
        if worker::pause(&mut stop, export_interval()).await {
            break;
        }
    }
    h.set(Activity::Stopped, "");
}

/// Registers the observable instrument(s) reporting family `f` from `snap`.
fn register(meter: &Meter, f: &MetricFamily, snap: &Snapshot) {
    let name = f.name().to_owned();
    let help = f.help().to_owned();
    let read = |value: fn(&Metric) -> f64| {
        let (snap, name) = (snap.clone(), name.clone());
        move |o: &dyn AsyncInstrument<f64>| observe(&snap, &name, value, o)
    };
    match f.type_() {
        MetricType::COUNTER => {
            let otel = name.strip_suffix("_total").unwrap_or(&name).to_owned();
            meter
                .f64_observable_counter(otel)
                .with_description(help)
                .with_callback(read(|m| m.counter.value()))
                .build();
        }
        MetricType::GAUGE => {
            meter
                .f64_observable_gauge(name.clone())
                .with_description(help)
                .with_callback(read(|m| m.gauge.value()))
                .build();
        }
        MetricType::HISTOGRAM => {
            meter
                .f64_observable_counter(format!("{name}_count"))
                .with_description(help.clone())
                .with_callback(read(|m| m.histogram.sample_count() as f64))
                .build();
            meter
                .f64_observable_counter(format!("{name}_sum"))
                .with_description(help)
                .with_callback(read(|m| m.histogram.sample_sum()))
                .build();
        }
        // floe-control registers no summaries or untyped metrics.
        _ => {}
    }
}

/// Reports every series of family `name` in `snap`, its labels as attributes.
fn observe(snap: &Snapshot, name: &str, value: fn(&Metric) -> f64, o: &dyn AsyncInstrument<f64>) {
    let s = snap.load();
    let Some(f) = s.get(name) else { return };
    for m in &f.metric {
        let attrs: Vec<KeyValue> = m
            .label
            .iter()
            .map(|l| KeyValue::new(l.name().to_owned(), l.value().to_owned()))
            .collect();
        o.observe(value(m), &attrs);
    }
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
