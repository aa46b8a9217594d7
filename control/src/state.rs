//! The control plane's shared state: nodes, followed tables and their warm progress, the file
//! map, the heat ledger, the byte-rate limiter and the worker board.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use tokio::sync::Mutex;

use crate::config::Settings;
use crate::fleet::Nodes;
use crate::heat::Ledger;
use crate::mapper::FileMap;
use crate::node::NodeClient;
use crate::placement::{EveryNode, Placement};
use floe_core::worker::Board;

/// Where warming a table's current commit stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarmPhase {
    /// A commit was seen; warming has not started.
    #[default]
    Pending,
    /// Metadata, manifests and footers are being warmed.
    Warming,
    /// A compaction's hot column chunks are being prefetched.
    Prefetching,
    /// Done.
    Warm,
    /// Stopped at the table's budget (the note says where).
    OverBudget,
    /// Warming failed (the warmer's last error says why).
    Failed,
}

/// Warm progress of one table's current commit.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WarmProgress {
    /// Its phase.
    pub phase: WarmPhase,
    /// Objects to warm (metadata.json, manifest list, manifests, footers).
    pub total: u64,
    /// Objects warmed.
    pub done: u64,
    /// Bytes warmed (whole blocks).
    pub bytes: u64,
    /// Bytes prefetched after a compaction.
    pub prefetched_bytes: u64,
    /// Why warming stopped early, when it did.
    pub note: String,
}

/// One followed table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableState {
    /// Current metadata.json location.
    pub metadata_location: String,
    /// Current snapshot id.
    pub snapshot_id: Option<i64>,
    /// The current snapshot's operation (append, overwrite, replace, delete).
    pub operation: String,
    /// Data files in the current snapshot.
    pub data_files: u64,
    /// Commits seen since start.
    pub commits: u64,
    /// Warm progress.
    pub warm: WarmProgress,
    /// Replaced files waiting for their grace period before being purged.
    pub purges_pending: u64,
    /// Replaced files purged.
    pub purged: u64,
}

/// Shared state of one floe-control process.
pub struct Control {
    /// Settings.
    pub settings: Settings,
    /// Admin clients, first one serves reads (the fleet's live members when it is one).
    pub nodes: Nodes,
    /// Followed tables by `namespace.table`.
    pub tables: RwLock<BTreeMap<String, TableState>>,
    /// The file map.
    pub files: FileMap,
    /// Each table's live data files at its last warmed commit.
    pub live: std::sync::Mutex<
        std::collections::HashMap<String, std::collections::HashSet<crate::mapper::FileKey>>,
    >,
    /// The heat ledger.
    pub heat: Ledger,
    /// Byte-rate limit of warming and prefetch together.
    pub rate: RateLimit,
    /// Worker states.
    pub board: Board,
    /// Which nodes get each warm.
    pub placement: Box<dyn Placement>,
    /// The scheduler, once started (the watcher hands it each commit's event).
    pub sched: std::sync::OnceLock<Arc<floe_sched::Scheduler>>,
    /// What the console shows of the fleet and the heat over time ([`crate::console`]).
    pub console: crate::console::Console,
    /// What each table's last warmed commit told the nodes (sent again to a restarted node).
    pub published: std::sync::Mutex<BTreeMap<String, Arc<Published>>>,
    /// Pinned tables ([`crate::pins`]).
    pub pins: crate::pins::PinBook,
    /// What the pin keeper last told each node ([`crate::pins::keeper`]).
    pub told: Mutex<crate::pins::keeper::Told>,
}

/// What one commit's warm told the nodes: the catalog's classification of its files (the
/// chunk hints come from the file map).
#[derive(Debug, Default)]
pub struct Published {
    /// Metadata files (metadata.json, manifest list, manifests, small delete files).
    pub metadata: Vec<crate::mapper::FileKey>,
    /// Live data files.
    pub live: Arc<Vec<crate::warmer::LiveFile>>,
}

impl Control {
    /// Builds the state from settings; loads the persisted heat ledger.
    pub fn new(settings: Settings) -> Arc<Self> {
        let nodes = Nodes::new(
            settings
                .nodes
                .iter()
                .cloned()
                .map(NodeClient::new)
                .collect(),
        );
        let heat = Ledger::open(&settings.heat.path, settings.heat.half_life_secs);
        let rate = RateLimit::new(settings.warm.bytes_per_sec);
        let pins = crate::pins::PinBook::open(&settings.pins.path);
        Arc::new(Self {
            settings,
            nodes,
            tables: RwLock::default(),
            files: FileMap::default(),
            live: Default::default(),
            heat,
            rate,
            board: Board::default(),
            placement: Box::new(EveryNode),
            sched: std::sync::OnceLock::new(),
            console: Default::default(),
            published: Default::default(),
            pins,
            told: Default::default(),
        })
    }

    /// Updates one table's state.
    pub fn table(&self, name: &str, f: impl FnOnce(&mut TableState)) {
        if let Ok(mut t) = self.tables.write() {
            f(t.entry(name.to_owned()).or_default());
        }
    }

    /// Bytes warmed for `table`'s current commit so far.
    pub fn spent(&self, table: &str) -> u64 {
        self.tables
            .read()
            .ok()
            .and_then(|t| t.get(table).map(|t| t.warm.bytes))
            .unwrap_or(0)
    }

    /// Each table's live data files at its last warmed commit.
    pub fn live_files(&self) -> BTreeMap<String, Arc<Vec<crate::warmer::LiveFile>>> {
        self.published
            .lock()
            .map(|p| p.iter().map(|(t, c)| (t.clone(), c.live.clone())).collect())
            .unwrap_or_default()
    }

    /// A copy of every table's state.
    pub fn tables(&self) -> BTreeMap<String, TableState> {
        self.tables.read().map(|t| t.clone()).unwrap_or_default()
    }
}

/// A byte-rate limiter: each caller is scheduled after the bytes before it have "drained" at
/// the configured rate. One lock per warmed object, never on a request path.
pub struct RateLimit {
    per_byte: f64,
    next: Mutex<Instant>,
}

impl RateLimit {
    /// A limiter at `bytes_per_sec`.
    pub fn new(bytes_per_sec: u64) -> Self {
        Self {
            per_byte: 1.0 / bytes_per_sec.max(1) as f64,
            next: Mutex::new(Instant::now()),
        }
    }

    /// Waits for the right to move `bytes`.
    pub async fn acquire(&self, bytes: u64) {
        let start = {
            let mut next = self.next.lock().await;
            let now = Instant::now();
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(bytes as f64 * self.per_byte);
            start
        };
        tokio::time::sleep_until(start).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rate_limit_spaces_callers() {
        let r = RateLimit::new(1 << 20);
        let t0 = tokio::time::Instant::now();
        r.acquire(1 << 20).await; // first goes at once
        assert_eq!(t0.elapsed(), Duration::ZERO);
        r.acquire(1).await; // waits for the first MiB to drain
        assert!(t0.elapsed() >= Duration::from_millis(999));
    }
}
