//! The `console` worker: every [`POLL`] it reads each node's admin documents (`/stats`,
//! `/fleet`, `/writeback`) into one [`FleetView`] and samples the heat ledger into a bounded
//! history ([`HeatHistory`]), so the page's reads never wait on a node and the heat map has a
//! time axis. Its state on the board: how many nodes answered the last round.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use serde_json::Value;

use crate::node::NodeClient;
use crate::state::Control;
use floe_core::away::wall_ms as now_ms;
use floe_core::wire::StatsDoc;
use floe_core::worker::{pause, Activity, Handle, Shutdown};

/// How often the nodes are read: as often as an operator watching the page notices a change,
/// and cheap for the nodes (three small admin GETs each).
pub const POLL: Duration = Duration::from_secs(2);
/// Heat samples kept: ten minutes at [`POLL`].
pub const HEAT_SAMPLES: usize = 300;
/// Cells (partition, column) per table in the heat map: the hottest, so the map stays readable.
pub const HEAT_CELLS: usize = 16;

/// One node as the last round saw it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeRow {
    /// Its admin URL.
    pub url: String,
    /// Its fleet id (empty when not in a fleet).
    pub node_id: String,
    /// Its gossip state (`active`, `draining`), or `down` when it did not answer.
    pub state: String,
    /// Its advertised capacity (the rendezvous weight).
    pub capacity_bytes: u64,
    /// Why it could not be read, when it could not.
    pub error: String,
    /// Its block cache: both stores' DRAM and disk tiers and counters.
    pub stats: Option<StatsDoc>,
    /// Its write-back document (`None`: no write-back route).
    pub writeback: Option<Value>,
    /// Bytes per second propagated to the origin since the previous round.
    pub propagation_bytes_per_sec: f64,
}

/// What the last round read from the fleet.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetView {
    /// Wall-clock ms of the round (0: none yet).
    pub at_ms: u64,
    /// The nodes, by URL.
    pub nodes: Vec<NodeRow>,
}

/// One sample of the heat ledger: per table, (partition, column, bytes).
type HeatSample = (u64, HashMap<String, Vec<(String, String, f64)>>);

/// The heat ledger sampled over time.
#[derive(Default)]
pub struct HeatHistory {
    samples: Mutex<VecDeque<HeatSample>>,
}

/// A table's heat map: cells (partition, column) by time.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct HeatMap {
    /// Wall-clock ms of each column.
    pub times: Vec<u64>,
    /// The cells, hottest now first: (partition, column).
    pub cells: Vec<(String, String)>,
    /// `values[cell][time]`: decayed bytes read.
    pub values: Vec<Vec<f64>>,
}

impl HeatHistory {
    /// Keeps `sample`, dropping the oldest past [`HEAT_SAMPLES`].
    pub fn push(&self, at_ms: u64, per_table: HashMap<String, Vec<(String, String, f64)>>) {
        if let Ok(mut s) = self.samples.lock() {
            s.push_back((at_ms, per_table));
            while s.len() > HEAT_SAMPLES {
                s.pop_front();
            }
        }
    }

    /// The heat map of every table sampled.
    pub fn maps(&self) -> HashMap<String, HeatMap> {
        let Ok(samples) = self.samples.lock() else {
            return HashMap::new();
        };
        let mut out: HashMap<String, HeatMap> = HashMap::new();
        let times: Vec<u64> = samples.iter().map(|(t, _)| *t).collect();
        // The cells are the latest sample's (hottest first), then any older ones still listed.
        for (_, per_table) in samples.iter().rev() {
            for (table, cells) in per_table {
                let map = out.entry(table.clone()).or_default();
                for (p, c, _) in cells {
                    let cell = (p.clone(), c.clone());
                    if map.cells.len() < HEAT_CELLS && !map.cells.contains(&cell) {
                        map.cells.push(cell);
                    }
                }
            }
        }
        for (table, map) in &mut out {
            map.times = times.clone();
            map.values = map
                .cells
                .iter()
                .map(|(p, c)| {
                    samples
                        .iter()
                        .map(|(_, per_table)| {
                            per_table
                                .get(table)
                                .and_then(|cells| cells.iter().find(|x| &x.0 == p && &x.1 == c))
                                .map_or(0.0, |x| x.2.round())
                        })
                        .collect()
                })
                .collect();
        }
        out
    }
}

/// What the console shows beside the control plane's own state.
#[derive(Default)]
pub struct Console {
    /// The fleet as last read.
    pub fleet: ArcSwap<FleetView>,
    /// The heat ledger over time.
    pub heat: HeatHistory,
    /// Bytes of each table's live files the fleet holds, summed over nodes (every
    /// [`HELD_EVERY`] rounds).
    pub held: std::sync::Mutex<HashMap<String, u64>>,
    rounds: std::sync::atomic::AtomicU64,
}

/// The fleet's held bytes per table are read every this many rounds (20 s): a request per
/// node and bucket for up to [`HELD_KEYS_PER_POST`] files each.
pub const HELD_EVERY: u64 = 10;
/// Keys per `POST /held`.
pub const HELD_KEYS_PER_POST: usize = 2000;

/// Bytes of each table's live files held by the fleet's nodes together; a node that does not
/// answer counts 0.
pub async fn held_bytes(ctl: &Control) -> HashMap<String, u64> {
    let nodes = ctl.nodes.current();
    let mut out = HashMap::new();
    for (table, live) in ctl.live_files() {
        let mut by_bucket: HashMap<&str, Vec<String>> = HashMap::new();
        for f in live.iter() {
            by_bucket.entry(&f.loc.0).or_default().push(f.loc.1.clone());
        }
        let mut total = 0;
        for n in nodes.iter() {
            for (bucket, keys) in &by_bucket {
                for batch in keys.chunks(HELD_KEYS_PER_POST) {
                    total += n
                        .held(bucket, batch)
                        .await
                        .map(|b| b.iter().sum::<u64>())
                        .unwrap_or(0);
                }
            }
        }
        out.insert(table, total);
    }
    out
}

/// Reads one node; `previous`: its row of the round before (for the propagation rate).
async fn read_node(n: &NodeClient, previous: Option<&NodeRow>, seconds: f64) -> NodeRow {
    let mut row = NodeRow {
        url: n.url().to_owned(),
        state: "active".into(),
        ..NodeRow::default()
    };
    let (stats, fleet, wb) = tokio::join!(n.stats(), n.doc("/fleet"), n.doc("/writeback"));
    match stats {
        Ok(s) => row.stats = Some(s),
        Err(e) => {
            row.state = "down".into();
            row.error = e.to_string();
            return row;
        }
    }
    if let Ok(Some(view)) = fleet {
        row.node_id = view["node_id"].as_str().unwrap_or_default().to_owned();
        let me = view["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["node_id"] == view["node_id"]);
        if let Some(me) = me {
            row.state = me["state"].as_str().unwrap_or("active").to_owned();
            row.capacity_bytes = me["capacity_bytes"].as_u64().unwrap_or(0);
        }
    }
    row.writeback = wb.ok().flatten().filter(|w| w["enabled"] == true);
    let propagated = |r: &NodeRow| {
        r.writeback
            .as_ref()
            .and_then(|w| w["propagated_bytes"].as_u64())
    };
    if let (Some(now), Some(before)) = (propagated(&row), previous.and_then(propagated)) {
        row.propagation_bytes_per_sec = now.saturating_sub(before) as f64 / seconds.max(0.001);
    }
    row
}

/// One round: every node read at once, then the heat sampled.
pub async fn round(ctl: &Control) -> usize {
    let console = &ctl.console;
    let before = console.fleet.load_full();
    let seconds = now_ms().saturating_sub(before.at_ms) as f64 / 1000.0;
    let nodes = ctl.nodes.current();
    let reads = nodes.iter().map(|n| {
        let previous = before.nodes.iter().find(|r| r.url == n.url());
        read_node(n, previous, seconds)
    });
    let rows: Vec<NodeRow> = futures::future::join_all(reads).await;
    let up = rows.iter().filter(|r| r.error.is_empty()).count();
    console.fleet.store(Arc::new(FleetView {
        at_ms: now_ms(),
        nodes: rows,
    }));
    let mut per_table: HashMap<String, Vec<(String, String, f64)>> = HashMap::new();
    for table in ctl.tables().keys() {
        let cells = ctl.heat.top(Some(table), HEAT_CELLS);
        let cells = cells.into_iter().map(|((_, p, c), v)| (p, c, v)).collect();
        per_table.insert(table.clone(), cells);
    }
    console.heat.push(now_ms(), per_table);
    let n = console
        .rounds
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let unread = {
        let known = console.held.lock().map(|h| h.len()).unwrap_or(0);
        known < ctl.live_files().len() // a new table is read at once
    };
    if n.is_multiple_of(HELD_EVERY) || unread {
        let held = held_bytes(ctl).await;
        if let Ok(mut h) = console.held.lock() {
            *h = held;
        }
    }
    up
}

/// Runs the console's rounds until shutdown.
pub async fn run(ctl: Arc<Control>, h: Handle, mut stop: Shutdown) {
    loop {
        h.set(Activity::Working, "reading the nodes");
        let up = round(&ctl).await;
        h.done();
        let total = ctl.console.fleet.load().nodes.len();
        h.set(Activity::Idle, format!("{up} of {total} nodes answered"));
        if pause(&mut stop, POLL).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(cells: &[(&str, &str, f64)]) -> HashMap<String, Vec<(String, String, f64)>> {
        let cells = cells
            .iter()
            .map(|(p, c, v)| (p.to_string(), c.to_string(), *v))
            .collect();
        HashMap::from([("ns.t".to_string(), cells)])
    }

    #[test]
    fn the_heat_map_lines_up_cells_by_time_and_stays_bounded() {
        let h = HeatHistory::default();
        h.push(1, sample(&[("d=1", "a", 10.0)]));
        h.push(2, sample(&[("d=1", "a", 8.0), ("d=2", "b", 50.0)]));
        let m = &h.maps()["ns.t"];
        assert_eq!(m.times, vec![1, 2]);
        assert_eq!(
            m.cells,
            vec![("d=1".into(), "a".into()), ("d=2".into(), "b".into())]
        );
        assert_eq!(m.values, vec![vec![10.0, 8.0], vec![0.0, 50.0]]);
        for t in 0..(HEAT_SAMPLES as u64 + 10) {
            h.push(10 + t, sample(&[("d=1", "a", 1.0)]));
        }
        let m = &h.maps()["ns.t"];
        assert_eq!(m.times.len(), HEAT_SAMPLES);
        assert_eq!(m.times[0], 20, "the oldest samples went first");
    }
}
