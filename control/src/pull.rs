//! The heat worker: drains each node's access queue in batches, maps every access through the
//! file map to (table, partition, column), and saves the ledger periodically and on shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::ControlError;
use crate::state::Control;
use floe_core::worker::{now_secs, pause, Handle, Shutdown};

/// Records taken per node per pull.
const BATCH: usize = 10_000;
/// How often the ledger is written.
const SAVE_EVERY: Duration = Duration::from_secs(10);

/// Pulls once from every node (a node that does not answer does not stop the others); returns
/// accesses recorded, or the unreachable nodes' errors.
pub async fn pull_once(ctl: &Control) -> Result<usize, ControlError> {
    let mut n = 0;
    let mut errors = Vec::new();
    let files = ctl.files.load();
    let now = now_secs();
    for node in ctl.nodes.current().iter() {
        match node.accesses(BATCH).await {
            Ok((rows, _dropped)) => {
                n += rows.len();
                for (bucket, key, _etag, offset, len) in rows {
                    ctl.heat.record(files.get(&(bucket, key)), offset, len, now);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(n)
    } else {
        Err(ControlError::Nodes(errors))
    }
}

/// Runs the heat worker until shutdown (saving the ledger on the way out).
pub async fn run(ctl: Arc<Control>, h: Handle, mut stop: Shutdown) {
    let every = Duration::from_millis(ctl.settings.heat.pull_interval_ms);
    let mut saved = Instant::now();
    loop {
        match pull_once(&ctl).await {
            Ok(_) => h.done(),
            Err(e) => h.error(format!("pull: {e}")),
        }
        if saved.elapsed() >= SAVE_EVERY {
            save(&ctl, &h);
            saved = Instant::now();
        }
        if pause(&mut stop, every).await {
            save(&ctl, &h);
            return;
        }
    }
}

fn save(ctl: &Control, h: &Handle) {
    if let Err(e) = ctl.heat.save() {
        h.error(format!("saving {}: {e}", ctl.settings.heat.path.display()));
    }
}
