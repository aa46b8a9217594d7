//! The scheduler's section of the control config: the queue's store and the deployment records.
//! [`SchedSection`] is what operators write (unknown keys refused, defaults named);
//! [`SchedSettings`] is the validated form (cron patterns parsed, time zones resolved, secrets
//! read from the environment).

use std::collections::BTreeMap;
use std::time::Duration;

use floe_core::config::{ConfigCx as Cx, ConfigError};
use serde::Deserialize;

use super::cron::{Catchup, Schedule};

/// `scheduler:` in floe-control's config. Absent: no scheduler runs and its routes answer 404.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedSection {
    /// The queue's store: `sqlite://PATH` (embedded, one floe-control) or `postgres://...`
    /// (several floe-control instances share it). Default `sqlite://.floe-control/sched.db`.
    #[serde(default)]
    pub store: Option<String>,
    /// An environment variable holding the store URL instead (a PostgreSQL password stays out
    /// of the file). At most one of `store`, `store_env`.
    #[serde(default)]
    pub store_env: Option<String>,
    /// Runs at once on this instance. Default 4: worker runs are subprocesses that mostly wait
    /// on I/O, and two cores are the smallest machine we run on.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// How long a claimed run is held without a renewal. Renewed every third of it while the
    /// run lives, so it only bounds how soon a crashed instance's run is retried. Default 30 s.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Environment every worker gets (a deployment's own `env` wins on a clash): where the
    /// worker SDK finds the catalog and the local Floe (`FLOE_CATALOG_URI`, `FLOE_S3_ENDPOINT`,
    /// ...). `FLOE_CATALOG_URI` defaults to `catalog.uri` when a catalog is configured.
    #[serde(default)]
    pub worker_env: BTreeMap<String, String>,
    /// Where workers spool their run-log events until the run-log table takes them
    /// (`FLOE_RUN_LOG_DIR`; a catalog outage must not block a run). Default
    /// `.floe-control/run-log`, beside the default store.
    #[serde(default = "default_run_log_dir")]
    pub run_log_dir: String,
    /// The deployments.
    #[serde(default)]
    pub deployments: Vec<DeploymentSection>,
}

fn default_run_log_dir() -> String {
    ".floe-control/run-log".into()
}

/// One deployment record (kind `worker`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSection {
    /// Unique name: letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// `worker` (a subprocess per event); the only kind this scheduler runs.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// The program and its arguments.
    pub code: CodeSection,
    /// What starts a run.
    #[serde(default)]
    pub triggers: Vec<TriggerSection>,
    /// Output tables, handed to the worker (`FLOE_OUTPUT_TABLES`, comma-separated) so the
    /// same code can write elsewhere by editing the record.
    #[serde(default)]
    pub output_tables: Vec<String>,
    /// Extra environment for the worker.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A run is killed after this long. Default 3600 s.
    #[serde(default = "default_time_limit")]
    pub time_limit_secs: u64,
    /// At the time limit a worker's process group gets SIGTERM, then SIGKILL this long after
    /// if it still runs (as Kubernetes' terminationGracePeriodSeconds; at most the time limit).
    /// Default 30 s.
    #[serde(default = "default_stop_grace")]
    pub stop_grace_secs: u64,
    /// Retries after a failed, timed-out or lost run. Default 2 (three attempts).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// First retry's delay; doubles per attempt, capped at 10 minutes. Default 1000 ms.
    #[serde(default = "default_backoff")]
    pub retry_backoff_ms: u64,
}

/// A worker's program.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeSection {
    /// The executable (a path, or a name looked up on PATH).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory. Default: floe-control's.
    #[serde(default)]
    pub dir: Option<String>,
}

/// One trigger.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum TriggerSection {
    /// A cron schedule.
    Cron(CronSection),
    /// An HTTP request to `/hooks/<path>`.
    Webhook(WebhookSection),
    /// A CloudEvent subscription.
    Event(EventSection),
}

/// A cron trigger.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronSection {
    /// 5 fields, or 6 with seconds first (croner syntax).
    pub schedule: String,
    /// IANA time zone the schedule is read in. Default UTC.
    #[serde(default)]
    pub timezone: Option<String>,
    /// RFC 3339; intervals from here on are the trigger's. Default: when first seen.
    #[serde(default)]
    pub start_date: Option<String>,
    /// What to do with intervals already past: `sequential` (each in order, one at a time),
    /// `parallel` (all at once), `none` (skip them; start live). Default `none`.
    #[serde(default)]
    pub catchup: Catchup,
}

/// A webhook trigger.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    /// The request path after `/hooks/`.
    pub path: String,
    /// An environment variable holding a shared secret; when set, requests must carry
    /// `x-floe-signature: sha256=<hex HMAC-SHA256 of the body>`, or, to be refused when
    /// replayed later, `x-floe-signature: t=<unix seconds>,sha256=<hex HMAC-SHA256 of
    /// "<t>." and the body>`.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// The HTTP methods taken (others: 405). Default `[POST]`.
    #[serde(default = "default_hook_methods")]
    pub methods: Vec<String>,
    /// How far a signature's `t=` may be from now, either way. Default 300 s (as Stripe's
    /// and Slack's signed webhooks).
    #[serde(default = "default_hook_tolerance")]
    pub tolerance_secs: u64,
}

fn default_hook_methods() -> Vec<String> {
    vec!["POST".into()]
}
fn default_hook_tolerance() -> u64 {
    300
}

/// An event subscription: exact type, optional source and subject.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventSection {
    /// CloudEvent `type`.
    #[serde(rename = "type")]
    pub ty: String,
    /// CloudEvent `source`, when given.
    #[serde(default)]
    pub source: Option<String>,
    /// CloudEvent `subject`, when given.
    #[serde(default)]
    pub subject: Option<String>,
}

fn default_concurrency() -> usize {
    4
}
fn default_lease_ms() -> u64 {
    30_000
}
fn default_kind() -> String {
    "worker".into()
}
fn default_time_limit() -> u64 {
    3600
}
fn default_stop_grace() -> u64 {
    30
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> u64 {
    1000
}

/// A validated trigger.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// Cron.
    Cron(Box<Schedule>),
    /// Webhook path and its secret.
    Webhook {
        /// Path after `/hooks/`.
        path: String,
        /// Shared secret.
        secret: Option<Vec<u8>>,
        /// Methods taken.
        methods: Vec<String>,
        /// How far a signed timestamp may be from now.
        tolerance: Duration,
    },
    /// Subscription.
    Event {
        /// Type.
        ty: String,
        /// Source.
        source: Option<String>,
        /// Subject.
        subject: Option<String>,
    },
}

/// A validated deployment.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// Name.
    pub name: String,
    /// Program.
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub dir: Option<String>,
    /// Triggers.
    pub triggers: Vec<Trigger>,
    /// Output tables.
    pub output_tables: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Time limit.
    pub time_limit: Duration,
    /// How long a worker has between SIGTERM and SIGKILL at the time limit.
    pub stop_grace: Duration,
    /// Attempts in all (retries + 1).
    pub max_attempts: u32,
    /// First retry delay.
    pub backoff: Duration,
}

/// The validated scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedSettings {
    /// Store URL.
    pub store: String,
    /// Runs at once.
    pub concurrency: usize,
    /// Lease length.
    pub lease: Duration,
    /// Deployments.
    pub deployments: Vec<Deployment>,
}

/// Validates the section; `catalog_uri` is the control plane's catalog, handed to workers.
pub fn validate(
    cx: &Cx<'_>,
    s: &SchedSection,
    catalog_uri: Option<&str>,
) -> Result<SchedSettings, ConfigError> {
    let store = match (&s.store, &s.store_env) {
        (Some(_), Some(_)) => {
            return Err(cx.err("scheduler", "give at most one of store, store_env"))
        }
        (Some(u), None) => u.clone(),
        (None, Some(v)) => cx.secret_env("scheduler.store_env", v)?,
        (None, None) => "sqlite://.floe-control/sched.db".into(),
    };
    if !(store.starts_with("sqlite:")
        || store.starts_with("postgres://")
        || store.starts_with("postgresql://"))
    {
        return Err(cx.err("scheduler.store", "must be sqlite://PATH or postgres://..."));
    }
    if !(1..=256).contains(&s.concurrency) {
        return Err(cx.err("scheduler.concurrency", "must be 1..=256"));
    }
    if !(300..=3_600_000).contains(&s.lease_ms) {
        return Err(cx.err("scheduler.lease_ms", "must be 300..=3600000"));
    }
    let run_log_dir = std::path::absolute(&s.run_log_dir)
        .map_err(|e| cx.err("scheduler.run_log_dir", format!("{:?}: {e}", s.run_log_dir)))?;
    let mut shared = s.worker_env.clone();
    shared
        .entry("FLOE_RUN_LOG_DIR".into())
        .or_insert_with(|| run_log_dir.display().to_string());
    if let Some(uri) = catalog_uri {
        shared
            .entry("FLOE_CATALOG_URI".into())
            .or_insert_with(|| uri.to_owned());
    }
    let mut out: Vec<Deployment> = Vec::new();
    for (i, d) in s.deployments.iter().enumerate() {
        let key = format!("scheduler.deployments[{i}]");
        let mut one = deployment(cx, &key, d)?;
        for (k, v) in &shared {
            one.env.entry(k.clone()).or_insert_with(|| v.clone());
        }
        out.push(one);
        if out[..out.len() - 1].iter().any(|o| o.name == d.name) {
            return Err(cx.err(format!("{key}.name"), format!("{:?} is used twice", d.name)));
        }
    }
    let mut hooks: Vec<&str> = Vec::new();
    for (i, d) in out.iter().enumerate() {
        for t in &d.triggers {
            if let Trigger::Webhook { path, .. } = t {
                if hooks.contains(&path.as_str()) {
                    let k = format!("scheduler.deployments[{i}].triggers");
                    return Err(cx.err(k, format!("webhook path {path:?} is used twice")));
                }
                hooks.push(path);
            }
        }
    }
    Ok(SchedSettings {
        store,
        concurrency: s.concurrency,
        lease: Duration::from_millis(s.lease_ms),
        deployments: out,
    })
}

fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 128
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn deployment(cx: &Cx<'_>, key: &str, d: &DeploymentSection) -> Result<Deployment, ConfigError> {
    if !name_ok(&d.name) {
        return Err(cx.err(
            format!("{key}.name"),
            "1-128 letters, digits, '-', '_' or '.'",
        ));
    }
    if d.kind != "worker" {
        return Err(cx.err(
            format!("{key}.kind"),
            format!("{:?}: only `worker` is supported", d.kind),
        ));
    }
    if d.code.command.is_empty() {
        return Err(cx.err(format!("{key}.code.command"), "empty"));
    }
    if d.time_limit_secs == 0 || d.time_limit_secs > 7 * 86_400 {
        return Err(cx.err(format!("{key}.time_limit_secs"), "must be 1..=604800"));
    }
    if d.retries > 100 {
        return Err(cx.err(format!("{key}.retries"), "at most 100"));
    }
    let mut triggers = Vec::new();
    for (j, t) in d.triggers.iter().enumerate() {
        let tk = format!("{key}.triggers[{j}]");
        triggers.push(match t {
            TriggerSection::Cron(c) => Trigger::Cron(Box::new(
                Schedule::new(
                    &c.schedule,
                    c.timezone.as_deref(),
                    c.start_date.as_deref(),
                    c.catchup,
                )
                .map_err(|e| cx.err(format!("{tk}.cron"), e.to_string()))?,
            )),
            TriggerSection::Webhook(w) => {
                if !name_ok(&w.path) {
                    return Err(cx.err(
                        format!("{tk}.webhook.path"),
                        "1-128 letters, digits, '-', '_' or '.'",
                    ));
                }
                let secret = match &w.secret_env {
                    Some(v) => Some(
                        cx.secret_env(&format!("{tk}.webhook.secret_env"), v)?
                            .into_bytes(),
                    ),
                    None => None,
                };
                const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];
                if w.methods.is_empty() || w.methods.iter().any(|m| !METHODS.contains(&m.as_str()))
                {
                    return Err(cx.err(
                        format!("{tk}.webhook.methods"),
                        "a non-empty list of GET, POST, PUT, PATCH, DELETE",
                    ));
                }
                if w.tolerance_secs == 0 || w.tolerance_secs > 86_400 {
                    return Err(cx.err(format!("{tk}.webhook.tolerance_secs"), "must be 1..=86400"));
                }
                Trigger::Webhook {
                    path: w.path.clone(),
                    secret,
                    methods: w.methods.clone(),
                    tolerance: Duration::from_secs(w.tolerance_secs),
                }
            }
            TriggerSection::Event(e) => {
                if e.ty.is_empty() {
                    return Err(cx.err(format!("{tk}.event.type"), "empty"));
                }
                Trigger::Event {
                    ty: e.ty.clone(),
                    source: e.source.clone(),
                    subject: e.subject.clone(),
                }
            }
        });
    }
    Ok(Deployment {
        name: d.name.clone(),
        command: d.code.command.clone(),
        args: d.code.args.clone(),
        dir: d.code.dir.clone(),
        triggers,
        output_tables: d.output_tables.clone(),
        env: d.env.clone(),
        time_limit: Duration::from_secs(d.time_limit_secs),
        stop_grace: Duration::from_secs(d.stop_grace_secs.min(d.time_limit_secs)),
        max_attempts: d.retries + 1,
        backoff: Duration::from_millis(d.retry_backoff_ms.max(1)),
    })
}
