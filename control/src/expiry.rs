//! Purging replaced files: once a commit drops data files from the current snapshot (a
//! compaction, an overwrite, a delete), they are purged from the proxies after a grace period,
//! by default the table's own snapshot expiry age (`history.expire.max-snapshot-age-ms`, Iceberg's
//! default 5 days), so time-travel reads within that window stay warm.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::mapper::FileKey;
use crate::state::Control;
use floe_core::worker::{pause, Shutdown};

/// Iceberg's default `history.expire.max-snapshot-age-ms`: 5 days.
pub const DEFAULT_SNAPSHOT_AGE_MS: u64 = 5 * 24 * 3600 * 1000;

/// The grace period for `table`: the configured one, else the table's snapshot expiry age.
pub fn grace(ctl: &Control, properties: &std::collections::HashMap<String, String>) -> Duration {
    let ms = ctl.settings.prefetch.purge_after_ms.unwrap_or_else(|| {
        properties
            .get("history.expire.max-snapshot-age-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_SNAPSHOT_AGE_MS)
    });
    Duration::from_millis(ms)
}

/// Records `table`'s live files; returns the files the previous commit had and this one does not.
pub fn replaced(ctl: &Control, table: &str, live: HashSet<FileKey>) -> Vec<FileKey> {
    let Ok(mut all) = ctl.live.lock() else {
        return Vec::new();
    };
    let before = all.insert(table.to_owned(), live);
    let now = &all[table];
    before
        .map(|b| b.into_iter().filter(|f| !now.contains(f)).collect())
        .unwrap_or_default()
}

/// Purges `files` from every node after `grace`, unless shutdown comes first (then they stay
/// cached and age out by eviction; nothing is lost either way).
pub fn schedule(
    ctl: &Arc<Control>,
    table: &str,
    files: Vec<FileKey>,
    grace: Duration,
    stop: Shutdown,
) {
    if files.is_empty() {
        return;
    }
    let n = files.len() as u64;
    ctl.table(table, |t| t.purges_pending += n);
    let (ctl, table) = (ctl.clone(), table.to_owned());
    tokio::spawn(async move {
        let mut stop = stop;
        if pause(&mut stop, grace).await {
            return;
        }
        for (b, k) in &files {
            for node in ctl.nodes.current().iter() {
                if let Err(e) = node.purge(b, k).await {
                    tracing::warn!(node = node.url(), key = %k, error = %e, "purge failed");
                }
            }
        }
        ctl.table(&table, |t| {
            t.purges_pending = t.purges_pending.saturating_sub(n);
            t.purged += n;
        });
    });
}
