//! The console: a web page floe-control serves on its status listener (`GET /console`), read
//! only, that polls one JSON document (`GET /console/data`) every two seconds. It shows the
//! followed tables (last commit, snapshot, files, warm progress as a bar, heat by partition and
//! column over time), the fleet (nodes, weight, DRAM and disk tiers against their ceilings,
//! hit ratio, origin and peer bytes), write-back (dirty objects and bytes, oldest age,
//! propagation rate, repairs) and pipelines (deployments, next fire, recent runs with their
//! result, duration and log).
//!
//! The page is one HTML file with its script and style inline, compiled into the binary
//! (`include_str!`): nothing is fetched from anywhere else, so it works offline. Its charts
//! are SVG drawn by that script; no library.

pub mod gather;

use std::sync::Arc;

use serde_json::{json, Value};

use crate::state::Control;
pub use gather::Console;

/// The page.
pub const PAGE: &str = include_str!("page.html");

/// Runs listed per page load: enough for "what failed lately" without a pager.
pub const RUNS_SHOWN: i64 = 20;
/// Bytes of a run's log sent to the page (its tail: where a failure says why).
pub const LOG_TAIL: usize = 4096;

/// The last `max` bytes of `log`, cut at a character boundary.
fn tail(log: &str, max: usize) -> &str {
    let mut start = log.len().saturating_sub(max);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    &log[start..]
}

/// The document `GET /console/data` answers.
pub async fn data(ctl: &Control) -> Value {
    let console = &ctl.console;
    let heat = console.heat.maps();
    let held = console.held.lock().map(|h| h.clone()).unwrap_or_default();
    let live = ctl.live_files();
    let tables: Vec<Value> = ctl
        .tables()
        .into_iter()
        .map(|(name, t)| {
            json!({
                "name": name,
                "metadata_location": t.metadata_location,
                // As text: a snapshot id is an i64, past what a JavaScript number holds.
                "snapshot_id": t.snapshot_id.map(|id| id.to_string()),
                "operation": t.operation,
                "data_files": t.data_files,
                "commits": t.commits,
                "warm": t.warm,
                "purges_pending": t.purges_pending,
                "bytes": live.get(&name).map(|l| l.iter().map(|f| f.size).sum::<u64>()),
                "held_bytes": held.get(&name),
                "heat": heat.get(&name),
            })
        })
        .collect();
    let fleet = console.fleet.load_full();
    let pipelines = match ctl.sched.get() {
        Some(s) => {
            let runs = s.queue.runs(None, RUNS_SHOWN).await;
            let runs: Vec<Value> = match runs {
                Ok(r) => r
                    .into_iter()
                    .map(|mut r| {
                        r.log = tail(&r.log, LOG_TAIL).to_owned();
                        json!(r)
                    })
                    .collect(),
                Err(e) => vec![json!({"error": e.to_string()})],
            };
            json!({"enabled": true, "status": s.status().await, "runs": runs})
        }
        None => json!({"enabled": false}),
    };
    json!({
        "generated_ms": floe_core::away::wall_ms(),
        "follows_catalog": ctl.settings.follows_catalog,
        "workers": ctl.board.snapshot(),
        "tables": tables,
        "fleet": &*fleet,
        "pipelines": pipelines,
        "pins": ctl.pins.views(),
        "pin_buttons": ctl.settings.pins.console_buttons,
    })
}

/// Starts the console's worker.
pub fn spawn(
    ctl: &Arc<Control>,
    stop: &floe_core::worker::Shutdown,
) -> tokio::task::JoinHandle<()> {
    let h = ctl.board.handle("console");
    floe_core::worker::spawn(h.clone(), gather::run(ctl.clone(), h, stop.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_tail_keeps_the_end_and_whole_characters() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 10), "ab");
        assert_eq!(tail("aé", 1), "", "never half a character");
        assert!(
            PAGE.contains("/console/data"),
            "the page polls its document"
        );
        for outside in ["https://", "src=", "href=", "@import", "url("] {
            assert!(!PAGE.contains(outside), "the page loads nothing: {outside}");
        }
    }
}
