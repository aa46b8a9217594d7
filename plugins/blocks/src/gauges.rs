//! The block cache's counters as Prometheus metrics, read at each scrape (what `GET /stats`
//! shows), labelled by store (`data`, `metadata`, `kept`, and `data:<bucket>` for a route's
//! share, see [`crate::shares`]): hits and misses per store, each store's
//! DRAM use and disk traffic (disk reads are the disk tier's hits), and where fills came from.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use crate::cache::BlockCache;

/// The collector.
pub struct CacheCollector {
    cache: Arc<BlockCache>,
    counters: Vec<IntCounterVec>,
    gauges: Vec<IntGaugeVec>,
}

const COUNTERS: [(&str, &str); 9] = [
    (
        "floe_cache_hits_total",
        "Blocks a read found whole in the cache",
    ),
    (
        "floe_cache_misses_total",
        "Blocks a read waited on a fill for",
    ),
    ("floe_cache_inserted_total", "Blocks inserted"),
    (
        "floe_cache_admissions_rejected_total",
        "Blocks not admitted (first touch under pressure)",
    ),
    (
        "floe_cache_evictions_total",
        "Blocks that left the DRAM tier",
    ),
    (
        "floe_cache_disk_read_bytes_total",
        "Bytes read from the disk tier",
    ),
    (
        "floe_cache_disk_write_bytes_total",
        "Bytes written to the disk tier",
    ),
    (
        "floe_cache_fill_bytes_total",
        "Bytes filled into the cache, by source (origin, peer)",
    ),
    (
        "floe_cache_disk_pages_dropped_total",
        "Pages not written to the disk tier because its write queue was full",
    ),
];

const GAUGES: [(&str, &str); 3] = [
    ("floe_cache_dram_usage_bytes", "DRAM tier bytes in use"),
    ("floe_cache_dram_capacity_bytes", "DRAM tier ceiling"),
    ("floe_cache_disk_capacity_bytes", "Disk tier ceiling"),
];

impl CacheCollector {
    /// A collector over `cache`.
    pub fn new(cache: Arc<BlockCache>) -> prometheus::Result<Self> {
        let counters = COUNTERS
            .iter()
            .map(|(name, help)| {
                let labels: &[&str] = if name.ends_with("fill_bytes_total") {
                    &["store", "source"]
                } else {
                    &["store"]
                };
                IntCounterVec::new(Opts::new(*name, *help), labels)
            })
            .collect::<prometheus::Result<_>>()?;
        let gauges = GAUGES
            .iter()
            .map(|(name, help)| IntGaugeVec::new(Opts::new(*name, *help), &["store"]))
            .collect::<prometheus::Result<_>>()?;
        Ok(Self {
            cache,
            counters,
            gauges,
        })
    }
}

fn set(c: &IntCounterVec, labels: &[&str], v: u64) {
    let m = c.with_label_values(labels);
    m.reset();
    m.inc_by(v);
}

impl Collector for CacheCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d: Vec<&Desc> = self.counters.iter().flat_map(|c| c.desc()).collect();
        d.extend(self.gauges.iter().flat_map(|g| g.desc()));
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = crate::admin::stats(&self.cache);
        // A route's share is its own data store: `store="data:<bucket>"`.
        let shares: Vec<(String, &floe_core::wire::StoreStatsDoc)> = s
            .shares
            .iter()
            .map(|(bucket, st)| (format!("data:{bucket}"), st))
            .collect();
        let stores = [
            ("data", &s.data),
            ("metadata", &s.metadata),
            ("kept", &s.kept),
        ]
        .into_iter()
        .chain(shares.iter().map(|(name, st)| (name.as_str(), *st)));
        for (store, st) in stores {
            let counts = [
                st.hits,
                st.misses,
                st.inserted,
                st.admissions_rejected,
                st.evictions,
                st.disk_read_bytes,
                st.disk_write_bytes,
            ];
            for (c, v) in self.counters.iter().zip(counts) {
                set(c, &[store], v);
            }
            if let Some(dropped) = self.counters.get(8) {
                set(dropped, &[store], st.disk_pages_dropped);
            }
            if let Some(fill) = self.counters.get(7) {
                set(fill, &[store, "origin"], st.origin_bytes);
                set(fill, &[store, "peer"], st.peer_bytes);
            }
            let levels = [
                st.dram_usage_bytes,
                st.dram_capacity_bytes,
                st.disk_capacity_bytes,
            ];
            for (g, v) in self.gauges.iter().zip(levels) {
                g.with_label_values(&[store])
                    .set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
        let mut out: Vec<MetricFamily> = self.counters.iter().flat_map(|c| c.collect()).collect();
        out.extend(self.gauges.iter().flat_map(|g| g.collect()));
        out
    }
}
