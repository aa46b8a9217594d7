//! The prefetcher, after a compaction (a `replace` snapshot): the replacement files' footers are
//! warm already (the warmer read them); this warms the column chunks of the table's hottest
//! (partition, column) pairs in those files, within a per-commit budget and the byte rate shared
//! with the warmer. Heat is keyed by partition and column, not file, so it carries across.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{stream, StreamExt};

use tokio::sync::mpsc;

use crate::node::Span;
use crate::state::{Control, WarmPhase};
use crate::warmer::{set_phase, LiveFile, Replaced};
use floe_core::worker::{Activity, Handle, Shutdown};

/// Runs the prefetcher until shutdown: one replace commit at a time, behind the warmer.
pub async fn run(
    ctl: Arc<Control>,
    h: Handle,
    mut rx: mpsc::Receiver<Replaced>,
    mut stop: Shutdown,
) {
    floe_core::worker::drain(&h, &mut rx, &mut stop, |job: Replaced| {
        let (ctl, h) = (ctl.clone(), h.clone());
        async move {
            h.set(Activity::Working, job.name.clone());
            let bytes = after_replace(&ctl, &job.name, &job.live).await;
            tracing::info!(table = %job.name, bytes, "prefetched after compaction");
            set_phase(&ctl, &job.name, WarmPhase::Warm);
        }
    })
    .await
}

/// Warms the hot column chunks of the files a replace commit added. Returns bytes prefetched.
pub async fn after_replace(ctl: &Arc<Control>, table: &str, live: &[LiveFile]) -> u64 {
    let hot: HashSet<(String, String)> = ctl
        .heat
        .top(Some(table), ctl.settings.prefetch.top_pairs)
        .into_iter()
        .map(|((_, p, c), _)| (p, c))
        .collect();
    if hot.is_empty() {
        return 0;
    }
    let files = ctl.files.load();
    let mut ranges = Vec::new();
    for f in live.iter().filter(|f| f.new) {
        let Some(info) = files.get(&f.loc) else {
            continue;
        };
        for c in &info.chunks {
            if c.len > 0 && hot.contains(&(info.partition.to_string(), c.column.to_string())) {
                ranges.push((f.loc.clone(), c.start, c.start + c.len - 1));
            }
        }
    }
    // Adjacent chunks of one file become one warm (fewer, larger origin reads).
    ranges.sort();
    let merged = merge(ranges);
    let budget = ctl.settings.prefetch.budget_bytes;
    let mut planned = 0u64;
    let within: Vec<_> = merged
        .into_iter()
        .take_while(|(_, a, b)| {
            planned += b - a + 1;
            planned <= budget
        })
        .collect();
    let done: Vec<u64> = stream::iter(within)
        .map(|(l, a, b)| async move {
            yield_to_foreground(ctl).await;
            ctl.rate.acquire(b - a + 1).await;
            let mut warmed = 0;
            let nodes = ctl.nodes.current();
            // A fleet: one node routes each block to its owner, which fills and keeps it
            // (no copy elsewhere); the node is picked by key, so prefetch load spreads.
            let targets = if ctl.nodes.is_fleet() {
                let i = crate::fleet::pick(&l.1, nodes.len());
                nodes.get(i).into_iter().collect()
            } else {
                ctl.placement.targets(&nodes, &l.0, &l.1)
            };
            for n in targets {
                let span = Span::Range(a, b);
                let done = if ctl.nodes.is_fleet() {
                    n.warm_owners(&l.0, &l.1, span).await
                } else {
                    n.warm(&l.0, &l.1, span, None).await
                };
                match done {
                    Ok(w) => warmed = w,
                    Err(e) => tracing::warn!(key = %l.1, error = %e, "prefetch failed"),
                }
            }
            warmed
        })
        .buffer_unordered(ctl.settings.warm.concurrency)
        .collect()
        .await;
    let total = done.iter().sum();
    ctl.table(table, |t| t.warm.prefetched_bytes += total);
    total
}

/// Longest a prefetch read waits for foreground misses to clear before going anyway (so a
/// steadily busy node still gets its compaction prefetched, just slowly).
const MAX_YIELD: Duration = Duration::from_secs(1);
/// How often a yielding prefetch looks again.
const YIELD_STEP: Duration = Duration::from_millis(20);

/// Waits while any node has client reads waiting on the origin (up to [`MAX_YIELD`]).
async fn yield_to_foreground(ctl: &Control) {
    let start = tokio::time::Instant::now();
    while start.elapsed() < MAX_YIELD {
        let mut busy = false;
        for n in ctl.nodes.current().iter() {
            busy |= n.foreground_misses().await.unwrap_or(0) > ctl.settings.prefetch.yield_above;
        }
        if !busy {
            return;
        }
        tokio::time::sleep(YIELD_STEP).await;
    }
}

type Range = ((String, String), u64, u64);

/// Merges sorted ranges of the same file that touch or overlap.
fn merge(sorted: Vec<Range>) -> Vec<Range> {
    let mut out: Vec<Range> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some(last) if last.0 == r.0 && r.1 <= last.2 + 1 => last.2 = last.2.max(r.2),
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_ranges_of_one_file_merge() {
        let k = |s: &str| ("b".to_owned(), s.to_owned());
        let got = merge(vec![
            (k("f"), 0, 9),
            (k("f"), 10, 19),
            (k("f"), 30, 39),
            (k("g"), 40, 49),
        ]);
        assert_eq!(
            got,
            vec![(k("f"), 0, 19), (k("f"), 30, 39), (k("g"), 40, 49)]
        );
    }
}
