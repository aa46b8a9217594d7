//! Write-back's Prometheus metrics, registered once in the default registry (served on the
//! proxy's `/metrics`).

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec};

/// `floe_writeback_put_seconds{mode}`: time to answer a write-back route's PUT, by how it
/// went (`staged`, `sync`); its count is the number of such PUTs.
static PUT_SECONDS: LazyLock<Option<HistogramVec>> = LazyLock::new(|| {
    let h = HistogramVec::new(
        HistogramOpts::new(
            "floe_writeback_put_seconds",
            "Time to answer a write-back PUT, by mode (staged, sync)",
        )
        .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).ok()?),
        &["mode"],
    )
    .ok()?;
    // Fails only when registered twice (tests build several nodes in one process).
    let _ = prometheus::register(Box::new(h.clone()));
    Some(h)
});

/// Records one PUT answered in `mode` after `took`.
pub fn put(mode: &str, took: Duration) {
    if let Some(h) = PUT_SECONDS.as_ref() {
        h.with_label_values(&[mode]).observe(took.as_secs_f64());
    }
}

/// `floe_writeback_corrupt_shards_total`: fragment shards that failed their CRC32C on a read
/// (each read as an erasure).
static CORRUPT: LazyLock<Option<prometheus::IntCounter>> = LazyLock::new(|| {
    let c = prometheus::IntCounter::new(
        "floe_writeback_corrupt_shards_total",
        "Fragment shards that failed their CRC32C when read (treated as erasures)",
    )
    .ok()?;
    let _ = prometheus::register(Box::new(c.clone()));
    Some(c)
});

/// Records `n` corrupt shards.
pub fn corrupt(n: u64) {
    if let Some(c) = CORRUPT.as_ref() {
        c.inc_by(n);
    }
}

/// Corrupt shards seen so far.
pub fn corrupt_total() -> u64 {
    CORRUPT.as_ref().map_or(0, prometheus::IntCounter::get)
}

/// `floe_writeback_phase_seconds{phase}`: time spent in each phase of a write: `place`
/// (encode and the fragments' fsync reports), `journal` (the record's fsync and copies),
/// `propagate` (the origin upload), `repair` (rebuilding fragments).
static PHASE_SECONDS: LazyLock<Option<HistogramVec>> = LazyLock::new(|| {
    let h = HistogramVec::new(
        HistogramOpts::new(
            "floe_writeback_phase_seconds",
            "Time in each write-back phase (place, journal, propagate, repair)",
        )
        .buckets(prometheus::exponential_buckets(0.0005, 2.0, 18).ok()?),
        &["phase"],
    )
    .ok()?;
    let _ = prometheus::register(Box::new(h.clone()));
    Some(h)
});

/// Records background `phase` (`propagate`, `repair`) of write `id` from `started`: the
/// histogram, and a span of its own when traces are exported.
pub fn background(
    phase: &'static str,
    started: floe_core::spans::Started,
    id: impl std::fmt::Display,
) {
    self::phase(phase, started.elapsed());
    if floe_core::spans::enabled() {
        let name = match phase {
            "propagate" => "writeback.propagate",
            _ => "writeback.repair",
        };
        floe_core::spans::emit(
            floe_core::spans::Phase::new(name, started).attr("writeback.id", id),
        );
    }
}

/// Records `phase` taking `took`.
pub fn phase(phase: &str, took: Duration) {
    if let Some(h) = PHASE_SECONDS.as_ref() {
        h.with_label_values(&[phase]).observe(took.as_secs_f64());
    }
}

/// `floe_writeback_read_through_total`: reads of a staged write finished from the origin
/// because its fragments were freed mid-read (see [`crate::read_through`]).
static READ_THROUGH: LazyLock<Option<prometheus::IntCounter>> = LazyLock::new(|| {
    let c = prometheus::IntCounter::new(
        "floe_writeback_read_through_total",
        "Reads of a staged write finished from the origin after its fragments were freed",
    )
    .ok()?;
    let _ = prometheus::register(Box::new(c.clone()));
    Some(c)
});

/// Records one read finished from the origin.
pub fn read_through() {
    if let Some(c) = READ_THROUGH.as_ref() {
        c.inc();
    }
}
