//! Write-back's state as Prometheus metrics, read from the node at each scrape (what
//! `GET /writeback` shows): the backlog this node coordinates, its fragment store, and what
//! propagation, scrub and repair did. One collector, registered when the node is made.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, IntCounter, IntGauge};

use crate::node::Node;
use crate::propagate::Counts;
use crate::repair::RepairCounts;

/// The collector.
pub struct StateCollector {
    node: Arc<Node>,
    counts: Arc<Counts>,
    repairs: Arc<RepairCounts>,
    gauges: [IntGauge; 4],
    oldest: Gauge,
    counters: [IntCounter; 7],
}

fn int_gauge(name: &str, help: &str) -> prometheus::Result<IntGauge> {
    IntGauge::new(name, help)
}

fn counter(name: &str, help: &str) -> prometheus::Result<IntCounter> {
    IntCounter::new(name, help)
}

impl StateCollector {
    /// A collector over `node` and its workers' counts.
    pub fn new(
        node: Arc<Node>,
        counts: Arc<Counts>,
        repairs: Arc<RepairCounts>,
    ) -> prometheus::Result<Self> {
        Ok(Self {
            node,
            counts,
            repairs,
            gauges: [
                int_gauge(
                    "floe_writeback_dirty_objects",
                    "Acknowledged writes this node coordinates, not yet at the origin",
                )?,
                int_gauge("floe_writeback_dirty_bytes", "Bytes of those writes")?,
                int_gauge(
                    "floe_writeback_fragment_bytes",
                    "Fragment bytes kept or reserved on this node",
                )?,
                int_gauge(
                    "floe_writeback_fragment_ceiling_bytes",
                    "This node's fragment ceiling",
                )?,
            ],
            oldest: Gauge::new(
                "floe_writeback_oldest_dirty_age_seconds",
                "Age of the oldest of those writes",
            )?,
            counters: [
                counter(
                    "floe_writeback_propagated_total",
                    "Writes uploaded to the origin and freed",
                )?,
                counter(
                    "floe_writeback_propagated_bytes_total",
                    "Bytes uploaded to the origin",
                )?,
                counter(
                    "floe_writeback_propagation_failures_total",
                    "Uploads that failed (retried)",
                )?,
                counter(
                    "floe_writeback_superseded_total",
                    "Writes freed unpropagated: a later write of the key won",
                )?,
                counter(
                    "floe_writeback_repairs_total",
                    "Fragments rebuilt and placed again",
                )?,
                counter(
                    "floe_writeback_bad_fragments_total",
                    "Fragments a scrub found corrupt or missing",
                )?,
                counter(
                    "floe_writeback_orphan_fragments_removed_total",
                    "Orphan fragments swept",
                )?,
            ],
        })
    }
}

impl Collector for StateCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d: Vec<&Desc> = self.gauges.iter().flat_map(|g| g.desc()).collect();
        d.extend(self.oldest.desc());
        d.extend(self.counters.iter().flat_map(|c| c.desc()));
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let (objects, bytes, oldest_ms) = self.node.backlog();
        let f = &self.node.store.fragments;
        let gauges = [objects as u64, bytes, f.used(), f.ceiling()];
        for (g, v) in self.gauges.iter().zip(gauges) {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        self.oldest.set(oldest_ms as f64 / 1000.0);
        let (c, r) = (&self.counts, &self.repairs);
        let counts = [
            &c.propagated,
            &c.bytes,
            &c.failures,
            &c.superseded,
            &r.repaired,
            &r.bad,
            &r.orphans,
        ];
        for (m, v) in self.counters.iter().zip(counts) {
            m.reset();
            m.inc_by(v.load(Ordering::Relaxed));
        }
        let mut out: Vec<MetricFamily> = self.gauges.iter().flat_map(|g| g.collect()).collect();
        out.extend(self.oldest.collect());
        out.extend(self.counters.iter().flat_map(|c| c.collect()));
        out
    }
}
