//! `floe-control conform DEPLOYMENT`: the worker contract's conformance check (seed design 000,
//! section 7.2). It checks the two properties a worker can break without a type error:
//!
//! - **kill-and-resume equivalence**: the worker runs once cleanly and is then replayed on the
//!   same event (a second attempt of the same job); and, for each kill point of its first
//!   commit (`before-write`, `before-commit`, `after-commit`, through the SDK's `FLOE_KILL_AT`
//!   hook), killed there with SIGKILL and re-dispatched. Every table must end as the clean
//!   run's did: a replay commits nothing twice.
//! - **schema stability**: the tables' schemas, and the schema of the rows each commit passed,
//!   are the same in every run.
//!
//! Runs go through the scheduler's own harness (the same environment, process group and
//! parent-death signal as production), each against scratch copies of the output tables in the
//! `floe_conform` namespace (output tables are configuration, so the worker writes there
//! unchanged), with the run log off. Scratch tables are dropped when every check passes and
//! kept for inspection when one fails.

mod report;
mod state;

use std::sync::Arc;
use std::time::Duration;

use cloudevents::{AttributesReader, Event};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableIdent};
use iceberg_catalog_rest::RestCatalogBuilder;

use crate::config::Settings;
use crate::storage::FloeStorageFactory;
use floe_sched::config::{Deployment, Trigger};
use floe_sched::harness;
use floe_sched::queue::{Lease, Outcome, QueueError};
use floe_sched::store::SqlStore;
use report::{ran, reported, same, stable, Reported};
pub use report::{Check, Report};
use state::TableState;

/// The namespace of the scratch tables.
pub const NAMESPACE: &str = "floe_conform";
/// Where a worker is killed on its first attempt (the SDK's `FLOE_KILL_AT` points).
pub const KILL_POINTS: [&str; 3] = ["before-write", "before-commit", "after-commit"];

/// Why the check could not run (a failing worker is a report, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    /// The deployment or the config cannot be checked.
    #[error("{0}")]
    Config(String),
    /// The catalog or a table could not be read.
    #[error("catalog: {0}")]
    Catalog(String),
    /// The scratch queue could not be opened.
    #[error(transparent)]
    Queue(#[from] QueueError),
}
/// The event a conformance run replays: the last ended interval of the deployment's first cron
/// trigger, else a manual dispatch.
pub fn default_event(d: &Deployment) -> Result<Event, ConformError> {
    let now = floe_sched::now_ms();
    for (i, t) in d.triggers.iter().enumerate() {
        if let Trigger::Cron(s) = t {
            if let Some(iv) = s.last_interval(now) {
                return floe_sched::event::cron(d, i, s, iv)
                    .map_err(|e| ConformError::Config(e.to_string()));
            }
        }
    }
    floe_sched::event::manual(d, serde_json::json!({"conform": true}))
        .map_err(|e| ConformError::Config(e.to_string()))
}

/// `s` as a table-name part: lower-case letters, digits and `_`.
pub(super) fn ident_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A scratch copy's name for `table` in `phase`.
fn scratch(d: &Deployment, phase: &str, table: &str) -> TableIdent {
    let name = format!(
        "{}__{}__{}",
        ident_part(&d.name),
        ident_part(phase),
        ident_part(table)
    );
    TableIdent::new(NamespaceIdent::new(NAMESPACE.into()), name)
}
/// Runs the check.
pub async fn run(
    settings: &Settings,
    deployment: &str,
    event: Option<Event>,
) -> Result<Report, ConformError> {
    let sched = settings
        .scheduler
        .as_ref()
        .ok_or_else(|| ConformError::Config("the config has no scheduler section".into()))?;
    let d = sched
        .deployments
        .iter()
        .find(|d| d.name == deployment)
        .ok_or_else(|| ConformError::Config(format!("no deployment named {deployment:?}")))?;
    if d.output_tables.is_empty() {
        return Err(ConformError::Config(format!(
            "deployment {deployment} declares no output_tables: nothing to compare"
        )));
    }
    let cat = catalog(settings).await?;
    let event = match event {
        Some(e) => e,
        None => default_event(d)?,
    };
    let mut runner = Runner::open(d, event).await?;
    runner.check(&cat).await
}

async fn catalog(settings: &Settings) -> Result<Arc<dyn Catalog>, ConformError> {
    if !settings.follows_catalog {
        return Err(ConformError::Config(
            "the config has no catalog section".into(),
        ));
    }
    let node = settings.nodes.first().ok_or_else(|| {
        ConformError::Config("the config lists no nodes (tables are read through Floe)".into())
    })?;
    let cat = RestCatalogBuilder::default()
        .with_client(crate::http::shared())
        .with_storage_factory(Arc::new(FloeStorageFactory::new(node)))
        .load("floe", settings.catalog_props.iter().cloned().collect())
        .await
        .map_err(|e| ConformError::Catalog(e.to_string()))?;
    Ok(Arc::new(cat))
}

/// Runs the phases against the scratch queue.
struct Runner<'a> {
    d: &'a Deployment,
    event: Event,
    store: SqlStore,
    job: String,
    _dir: tempfile::TempDir,
}

impl<'a> Runner<'a> {
    async fn open(d: &'a Deployment, event: Event) -> Result<Runner<'a>, ConformError> {
        let dir = tempfile::tempdir().map_err(|e| ConformError::Config(e.to_string()))?;
        let url = format!("sqlite://{}/conform.db", dir.path().display());
        let store = SqlStore::open(&url, "conform".into(), "conform".into()).await?;
        let job = format!("conform:{}#{}", event.source(), event.id());
        Ok(Self {
            d,
            event,
            store,
            job,
            _dir: dir,
        })
    }

    /// One attempt of the phase's run.
    async fn attempt(&self, phase: &str, attempt: i32) -> Outcome {
        let mut d = self.d.clone();
        d.output_tables = self
            .d
            .output_tables
            .iter()
            .map(|t| scratch(self.d, phase, t).to_string())
            .collect();
        d.env.insert("FLOE_RUN_LOG_TABLE".into(), "off".into());
        if phase != "clean" {
            d.env.insert("FLOE_KILL_AT".into(), format!("{phase}:1"));
        }
        let lease = Lease {
            id: self.job.clone(),
            deployment: d.name.clone(),
            event: serde_json::to_string(&self.event).unwrap_or_default(),
            attempt,
            generation: i64::from(attempt),
            max_attempts: 2,
            accepted_ms: floe_sched::now_ms(),
        };
        // No renewal is due within the time limit: the scratch queue holds no lease to renew.
        let lease_len = d.time_limit.saturating_mul(4).max(Duration::from_secs(60));
        let (_keep, stop) = tokio::sync::watch::channel(false);
        harness::run(&d, &lease, None, &self.store, lease_len, stop).await
    }

    async fn states(
        &self,
        cat: &dyn Catalog,
        phase: &str,
    ) -> Result<Vec<TableState>, ConformError> {
        let mut out = Vec::new();
        for t in &self.d.output_tables {
            out.push(state::read(cat, &scratch(self.d, phase, t)).await?);
        }
        Ok(out)
    }

    async fn drop_phase(&self, cat: &dyn Catalog, phase: &str) -> Result<(), ConformError> {
        for t in &self.d.output_tables {
            let ident = scratch(self.d, phase, t);
            if cat.table_exists(&ident).await.unwrap_or(false) {
                cat.drop_table(&ident)
                    .await
                    .map_err(|e| ConformError::Catalog(format!("{ident}: {e}")))?;
            }
        }
        Ok(())
    }

    async fn check(&mut self, cat: &Arc<dyn Catalog>) -> Result<Report, ConformError> {
        let cat = cat.as_ref();
        let ns = NamespaceIdent::new(NAMESPACE.into());
        if !cat.namespace_exists(&ns).await.unwrap_or(false) {
            cat.create_namespace(&ns, Default::default())
                .await
                .map_err(|e| ConformError::Catalog(format!("{NAMESPACE}: {e}")))?;
        }
        let mut checks = Vec::new();
        let mut schemas: Vec<(String, Vec<Reported>)> = Vec::new();
        let phases: Vec<&str> = std::iter::once("clean").chain(KILL_POINTS).collect();
        for p in &phases {
            self.drop_phase(cat, p).await?;
        }
        let first = self.attempt("clean", 1).await;
        checks.push(ran("the clean run succeeds", &first));
        schemas.push(("clean run".into(), reported(&first, self.d)));
        let clean = self.states(cat, "clean").await?;
        let replay = self.attempt("clean", 2).await;
        checks.push(ran("a replay of the same event succeeds", &replay));
        schemas.push(("replay".into(), reported(&replay, self.d)));
        checks.push(same(
            "a replay commits nothing twice",
            self.d,
            &clean,
            &self.states(cat, "clean").await?,
        ));
        for point in KILL_POINTS {
            let killed = self.attempt(point, 1).await;
            let resumed = self.attempt(point, 2).await;
            let stopped = killed.result != "ok";
            let name = format!("killed {point} its first commit and resumed");
            if !ran(&name, &resumed).ok {
                checks.push(ran(&name, &resumed));
                continue;
            }
            schemas.push((format!("resumed after {point}"), reported(&resumed, self.d)));
            let mut c = same(&name, self.d, &clean, &self.states(cat, point).await?);
            if !stopped {
                c.detail = format!(
                    "the worker did not stop at {point}:1 (no SDK commit?); {}",
                    c.detail
                );
            }
            checks.push(c);
        }
        checks.push(stable(&schemas));
        let mut kept = Vec::new();
        let passed = checks.iter().all(|c| c.ok);
        for p in &phases {
            if passed {
                self.drop_phase(cat, p).await?;
            } else {
                kept.extend(
                    self.d
                        .output_tables
                        .iter()
                        .map(|t| scratch(self.d, p, t).to_string()),
                );
            }
        }
        Ok(Report {
            deployment: self.d.name.clone(),
            event_id: self.event.id().to_owned(),
            checks,
            kept,
        })
    }
}
