//! The fleet's Prometheus metrics, registered once in the default registry (served on the
//! proxy's `/metrics`).

use std::sync::LazyLock;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts};

/// Every fleet metric.
pub struct Metrics {
    /// `floe_fleet_members`: live members in this node's view (itself included).
    pub members: IntGauge,
    /// `floe_fleet_owner_moves_total`: of 64 probe blocks, how many changed owner, summed over
    /// view changes (a cheap sample of how much ownership moves).
    pub owner_moves: IntCounter,
    /// `floe_fleet_gossip_rejected_total`: gossip datagrams dropped for a bad tag.
    pub gossip_rejected: IntCounter,
    /// `floe_fleet_gossip_messages_total{direction}`: authentic gossip datagrams sent and
    /// received (each round is a syn, a syn-ack and an ack between two nodes).
    pub gossip_messages: IntCounterVec,
    /// `floe_fleet_handover_bytes_total`: bytes pulled from other nodes when ownership moved.
    pub handover_bytes: IntCounter,
    /// `floe_peer_asks_total{kind, result}`: asks this node sent to owners.
    pub asks: IntCounterVec,
    /// `floe_peer_ask_seconds`: time until an owner's answer began.
    pub ask_seconds: Histogram,
    /// `floe_peer_served_total{kind, result}`: asks this node answered as an owner.
    pub served: IntCounterVec,
}

fn register<T: prometheus::core::Collector + Clone + 'static>(c: T) -> T {
    // Fails only when registered twice (tests build several nodes in one process).
    let _ = prometheus::register(Box::new(c.clone()));
    c
}

impl Metrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            members: register(IntGauge::new(
                "floe_fleet_members",
                "Live fleet members in this node's view",
            )?),
            owner_moves: register(IntCounter::new(
                "floe_fleet_owner_moves_total",
                "Probe blocks (of 64) that changed owner, summed over view changes",
            )?),
            gossip_rejected: register(IntCounter::new(
                "floe_fleet_gossip_rejected_total",
                "Gossip datagrams dropped for a missing or wrong tag",
            )?),
            gossip_messages: register(IntCounterVec::new(
                Opts::new(
                    "floe_fleet_gossip_messages_total",
                    "Authentic gossip datagrams sent and received",
                ),
                &["direction"],
            )?),
            handover_bytes: register(IntCounter::new(
                "floe_fleet_handover_bytes_total",
                "Bytes pulled from other nodes when ownership moved",
            )?),
            asks: register(IntCounterVec::new(
                Opts::new("floe_peer_asks_total", "Asks sent to owner nodes"),
                &["kind", "result"],
            )?),
            ask_seconds: register(Histogram::with_opts(
                HistogramOpts::new(
                    "floe_peer_ask_seconds",
                    "Time until an owner's answer began",
                )
                .buckets(vec![
                    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                ]),
            )?),
            served: register(IntCounterVec::new(
                Opts::new("floe_peer_served_total", "Asks answered for other nodes"),
                &["kind", "result"],
            )?),
        })
    }
}

/// The metrics; `None` only if prometheus refused a name (the names here are constants).
pub static METRICS: LazyLock<Option<Metrics>> = LazyLock::new(|| Metrics::new().ok());

/// Runs `f` on the metrics when they exist.
pub fn with(f: impl FnOnce(&Metrics)) {
    if let Some(m) = METRICS.as_ref() {
        f(m);
    }
}
