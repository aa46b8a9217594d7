//! floe-control's OpenTelemetry export over OTLP/HTTP, on when `otlp_endpoint` names a
//! collector ([`floe_core::otlp`] holds the exporters): every metric `GET /metrics` serves
//! ([`bridge`]); the scheduler's runs export their own spans (`floe_sched`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use floe_core::otlp::export_interval;
use floe_core::worker::{self, Activity, Handle, Shutdown};
use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;
use prometheus::proto::{Metric, MetricFamily, MetricType};

use crate::state::Control;

/// Starts the exporters toward `endpoint` (e.g. `http://collector:4318`) through
/// [`floe_core::otlp::init`]. Call before the async runtime starts.
pub fn init(endpoint: &str) -> Result<(), floe_core::otlp::OtlpError> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let attributes = vec![KeyValue::new("service.instance.id", host)];
    floe_core::otlp::init(endpoint, "floe-control", attributes).map(|_| ())
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
    let Some(meter) = floe_core::otlp::get().map(|o| o.meter.clone()) else {
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
