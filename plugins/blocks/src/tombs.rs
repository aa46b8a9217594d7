//! How far back the metadata tier's removals reach. foyer logs each removal (a tombstone) in a
//! ring of one slot per 4 KiB page of the device; a restart replays the ring, so a removed
//! entry stays removed only while its tombstone is still in the ring. After more removals
//! than the ring has slots, a mapping record removed before them could come back with the
//! disk tier (its region not yet reused), and a persisted mapping is trusted without asking
//! the origin: a stale read.
//!
//! So every mapping record carries the tier's removal count when it was written, and one
//! written more than half a ring of removals ago is not trusted: its key resolves again
//! (a HEAD, or the owner) and the record is written anew. The count is foyer's own delete
//! counter for the metadata store (every tombstone it writes, its own drops included), read
//! from a metrics registry given to that store, on top of a base persisted beside the alive
//! stamp: the file always holds a reservation ahead of the count, so a restart (even a
//! kill -9) starts at or past where the last run stopped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// foyer's tombstone slots: one per 4 KiB page of the device.
const PAGE: u64 = 4096;

/// The file holding the reservation, beside the alive stamp.
pub const TOMBS_FILE: &str = "floe-tombs";

/// The metadata tier's removal count (see the module doc).
pub struct TombClock {
    registry: prometheus::Registry,
    base: u64,
    reserved: AtomicU64,
    step: u64,
    horizon: u64,
    path: Option<PathBuf>,
}

impl TombClock {
    /// A clock for a metadata tier of `disk_bytes` in `tier` (no file when the tier has no
    /// disk): reads the last reservation and makes a new one.
    pub fn open(tier: &Path, disk_bytes: usize) -> Self {
        let slots = disk_bytes as u64 / PAGE;
        let path = (disk_bytes > 0).then(|| tier.parent().unwrap_or(tier).join(TOMBS_FILE));
        let base = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let clock = Self {
            registry: prometheus::Registry::new(),
            base,
            reserved: AtomicU64::new(base),
            step: (slots / 8).max(64),
            horizon: slots / 2,
            path,
        };
        clock.reserve();
        clock
    }

    /// The registry foyer's metadata store reports into.
    pub fn registry(&self) -> Box<mixtrics::registry::prometheus_0_14::PrometheusMetricsRegistry> {
        Box::new(
            mixtrics::registry::prometheus_0_14::PrometheusMetricsRegistry::new(
                self.registry.clone(),
            ),
        )
    }

    /// Removals the tier logged since its first run (at least).
    pub fn now(&self) -> u64 {
        let now = self.base + self.deletes_since_boot();
        if now + self.step / 2 >= self.reserved.load(Ordering::Relaxed) {
            self.reserve();
        }
        now
    }

    /// Whether a record written at `stamp` is still covered by the ring: its removal, if any,
    /// would still be replayed. `None` (a record of an older Floe) is not.
    pub fn covers(&self, stamp: Option<u64>) -> bool {
        stamp.is_some_and(|s| self.now().saturating_sub(s) < self.horizon)
    }

    /// Writes a reservation a step ahead of the count (a restart starts there).
    pub fn reserve(&self) {
        let ahead = self.base + self.deletes_since_boot() + self.step;
        let Some(path) = &self.path else {
            self.reserved.store(ahead, Ordering::Relaxed);
            return;
        };
        let _ = path.parent().map(std::fs::create_dir_all);
        match std::fs::write(path, ahead.to_string()) {
            Ok(()) => self.reserved.store(ahead, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "tombstone reservation not written")
            }
        }
    }

    /// foyer's delete counter for the store (`foyer_storage_op_total{op="delete"}`).
    fn deletes_since_boot(&self) -> u64 {
        self.registry
            .gather()
            .iter()
            .filter(|f| f.name() == "foyer_storage_op_total")
            .flat_map(|f| f.get_metric())
            .filter(|m| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == "op" && l.value() == "delete")
            })
            .map(|m| m.get_counter().value() as u64)
            .sum()
    }

    /// The horizon in removals (half the ring).
    pub fn horizon(&self) -> u64 {
        self.horizon
    }
}
