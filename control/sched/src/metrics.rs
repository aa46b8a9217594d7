//! The scheduler's metrics, registered once in a registry of its own that `/metrics` appends.

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts, Registry};

/// Counters and the dispatch-latency histogram.
pub struct Metrics {
    /// The registry `/metrics` gathers.
    pub registry: Registry,
    /// Jobs enqueued (new ids only), by deployment and trigger kind.
    pub dispatched: IntCounterVec,
    /// Runs ended, by deployment and result.
    pub runs: IntCounterVec,
    /// Failed runs queued again, by deployment.
    pub retries: IntCounterVec,
    /// Completions refused because their lease generation was stale.
    pub stale: IntCounterVec,
    /// Accepted -> worker started.
    pub latency: Histogram,
    /// Worker run time.
    pub duration: Histogram,
}

impl Metrics {
    /// Builds and registers them. Registration only fails on a name clash in this fresh
    /// registry, a programming error caught by the test below.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let dispatched = counter(
            "floe_sched_dispatched_total",
            "Jobs enqueued (new ids)",
            &["deployment", "trigger"],
        )?;
        let runs = counter(
            "floe_sched_runs_total",
            "Worker runs ended",
            &["deployment", "result"],
        )?;
        let retries = counter(
            "floe_sched_retries_total",
            "Failed runs queued again",
            &["deployment"],
        )?;
        let stale = counter(
            "floe_sched_stale_completions_total",
            "Completions refused: lease generation no longer live",
            &["deployment"],
        )?;
        let buckets = vec![
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
        ];
        let latency = Histogram::with_opts(
            HistogramOpts::new(
                "floe_sched_dispatch_latency_seconds",
                "Event accepted to worker started",
            )
            .buckets(buckets.clone()),
        )?;
        registry.register(Box::new(latency.clone()))?;
        let duration = Histogram::with_opts(
            HistogramOpts::new("floe_sched_run_duration_seconds", "Worker run time")
                .buckets(buckets),
        )?;
        registry.register(Box::new(duration.clone()))?;
        Ok(Self {
            registry,
            dispatched,
            runs,
            retries,
            stale,
            latency,
            duration,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_metric_registers() {
        assert_eq!(super::Metrics::new().unwrap().registry.gather().len(), 2);
    }
}
