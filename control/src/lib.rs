//! floe-control: follows an Iceberg REST catalog and keeps Floe's caches ahead of the engines.
//!
//! Named workers share one [`state::Control`]: the **watcher** polls the catalog and hands each
//! commit to the **warmer**, which walks metadata.json, the manifest list, manifests and Parquet
//! footers into the proxies' metadata stores, publishes the file map and sends each live file's
//! column chunks to the proxies (column-chunk fills); the **heat** worker
//! drains the proxies' access reports into a ledger by (table, partition, column); after a
//! compaction the **prefetcher** warms the hottest column chunks of the new files; the
//! **keeper** keeps pinned tables in the owners' kept stores and sends a restarted node what
//! lives only in its DRAM (classifications, chunk hints, pins) (`pins`). **status**
//! serves the JSON `floe-control status` prints and the **console** page (`console`). With a `scheduler:` section the CloudEvents
//! scheduler (`floe_sched`) runs beside them; `conform` checks a worker against its contract.
//!
//! ```
//! let s = floe_control::config::parse(
//!     "example.yaml",
//!     "catalog: {uri: 'http://127.0.0.1:8181'}\nnodes: [{admin: 'http://127.0.0.1:9101', token: t}]",
//!     &|_| None,
//! ).unwrap();
//! assert_eq!(s.poll.as_secs(), 5);
//! ```

pub mod api;
pub mod config;
pub mod conform;
pub mod console;
pub mod error;
pub mod expiry;
pub mod fleet;
pub mod footer;
pub mod heat;
pub mod hints;
pub mod http;
pub mod mapper;
pub mod node;
pub mod otel;
pub mod pins;
pub mod placement;
pub mod prefetch;
pub mod pull;
pub mod state;
pub mod status;
pub mod storage;
mod validate;
pub mod warmer;
pub mod watcher;

#[cfg(test)]
mod sched_config_tests;

use floe_core::worker;
use tokio::sync::{mpsc, watch};

/// Starts every worker; returns when `stop` flips and they have finished (the ledger saved).
pub async fn run(settings: config::Settings, stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(settings.status_address).await?;
    let ctl = state::Control::new(settings);
    let (tx, rx) = mpsc::channel(64);
    let (ptx, prx) = mpsc::channel(64);
    let b = &ctl.board;
    let mut tasks = Vec::new();
    // Before the watcher, so the first commits it sees reach the scheduler.
    if let Some(s) = ctl.settings.scheduler.clone() {
        let sched = floe_sched::Scheduler::open(s).await?;
        tasks.extend(sched.spawn(b, &stop));
        let _ = ctl.sched.set(sched);
    }
    if ctl.settings.follows_catalog {
        tasks.extend([
            worker::spawn(
                b.handle("watcher"),
                watcher::run(ctl.clone(), b.handle("watcher"), tx, stop.clone()),
            ),
            worker::spawn(
                b.handle("warmer"),
                warmer::run(ctl.clone(), b.handle("warmer"), rx, ptx, stop.clone()),
            ),
            worker::spawn(
                b.handle("prefetcher"),
                prefetch::run(ctl.clone(), b.handle("prefetcher"), prx, stop.clone()),
            ),
            worker::spawn(
                b.handle("heat"),
                pull::run(ctl.clone(), b.handle("heat"), stop.clone()),
            ),
            worker::spawn(
                b.handle("fleet"),
                fleet::run(ctl.clone(), b.handle("fleet"), stop.clone()),
            ),
            worker::spawn(
                b.handle("keeper"),
                pins::keeper::run(ctl.clone(), b.handle("keeper"), stop.clone()),
            ),
        ]);
    }
    if ctl.settings.otlp_endpoint.is_some() {
        tasks.push(worker::spawn(
            b.handle("otel-metrics"),
            otel::bridge(ctl.clone(), b.handle("otel-metrics"), stop.clone()),
        ));
    }
    tasks.push(console::spawn(&ctl, &stop));
    tasks.push(worker::spawn(
        b.handle("status"),
        api::serve(ctl.clone(), b.handle("status"), listener, stop.clone()),
    ));
    for t in tasks {
        t.await?;
    }
    Ok(())
}
