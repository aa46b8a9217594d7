//! Hot reload: on SIGHUP (and, with `server.reload_watch`, when the file changes) the config
//! file is read and validated again, and a new route table (routes, client keys, origins,
//! filters) replaces the running one. Requests under way keep the route they started with, and
//! no listener or connection is touched. A file that fails validation is refused with the same
//! error `floe-proxy check` prints, and the running table stays.
//!
//! What a reload does not change (a restart or `floe-proxy --upgrade` does): listeners, the
//! admin and metrics listeners, threads, plugin-wide sections (`cache`, `fleet`,
//! `writeback:` at the top level) and embedded origins (their folder and port).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use prometheus::{register_int_counter_vec, IntCounterVec};

use crate::chain::Plugins;
use crate::config::settings::{load, OriginPlace};
use crate::origin::Origin;
use crate::routes::RouteTable;

/// Reloads by result (`ok`, `error`).
static RELOADS: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    register_int_counter_vec!(
        "floe_config_reloads_total",
        "Config reloads by result",
        &["result"]
    )
    .ok()
});

/// Rebuilds the route table from the config file.
pub struct Reloader {
    path: PathBuf,
    table: Arc<ArcSwap<RouteTable>>,
    plugins: Plugins,
    /// The running origins, by name (embedded ones are kept across reloads).
    origins: Mutex<HashMap<String, Arc<Origin>>>,
    watch: bool,
}

impl Reloader {
    /// A reloader of `path` into `table`, building stages from the started `plugins`.
    pub fn new(
        path: PathBuf,
        table: Arc<ArcSwap<RouteTable>>,
        plugins: Plugins,
        origins: HashMap<String, Arc<Origin>>,
        watch: bool,
    ) -> Self {
        Self {
            path,
            table,
            plugins,
            origins: Mutex::new(origins),
            watch,
        }
    }

    /// Reads, validates and swaps in the file's routes; returns how many routes it has.
    pub fn reload(&self) -> Result<usize, String> {
        let settings = load(&self.path).map_err(|e| e.to_string())?;
        let mut running = self
            .origins
            .lock()
            .map_err(|_| "origin table poisoned".to_owned())?;
        let mut origins = HashMap::new();
        for (name, spec) in &settings.origins {
            let origin = match &spec.place {
                OriginPlace::Remote(url) => Arc::new(Origin::new(spec, url)),
                OriginPlace::Embedded(_) => running.get(name).cloned().ok_or_else(|| {
                    format!("origins.{name}: a new embedded origin needs a restart")
                })?,
            };
            origins.insert(name.clone(), origin);
        }
        let s = &settings.server;
        let table = RouteTable::new(
            &settings.routes,
            &origins,
            &self.plugins,
            &s.region,
            &s.hostnames,
        )
        .map_err(|e| e.to_string())?;
        self.table.store(Arc::new(table));
        *running = origins;
        Ok(settings.routes.len())
    }

    fn reload_and_log(&self, why: &str) {
        let result = self.reload();
        if let Some(m) = RELOADS.as_ref() {
            let label = if result.is_ok() { "ok" } else { "error" };
            m.with_label_values(&[label]).inc();
        }
        match result {
            Ok(n) => {
                tracing::info!(file = %self.path.display(), routes = n, why, "config reloaded")
            }
            Err(e) => tracing::error!(
                file = %self.path.display(),
                why,
                error = %e,
                "config reload refused; the running config stays"
            ),
        }
    }

    fn modified(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }
}

/// How often the opt-in file watch looks at the file's modification time.
const WATCH_EVERY: Duration = Duration::from_secs(1);

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "no SIGHUP handler: reload is off");
                return;
            }
        };
        let mut seen = self.modified();
        let mut tick = tokio::time::interval(WATCH_EVERY);
        loop {
            tokio::select! {
                _ = hup.recv() => self.reload_and_log("SIGHUP"),
                _ = tick.tick(), if self.watch => {
                    let now = self.modified();
                    if now != seen {
                        seen = now;
                        self.reload_and_log("file changed");
                    }
                }
                r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
            }
        }
    }
}
