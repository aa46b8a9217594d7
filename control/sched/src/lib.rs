//! The CloudEvents scheduler: deployments (a worker program and its triggers) run once per
//! event, off a durable queue.
//!
//! Every dispatch is a CloudEvents 1.0 event: cron ticks (each with its logical date and
//! interval), webhook requests, CloudEvents posted to `/events`, the catalog watcher's
//! `org.apache.iceberg.snapshot.committed`, and dispatches by hand. An event is persisted as
//! one job per subscribed deployment, under an id fixed by (deployment, source, id), before
//! its sender hears 202. Three named workers run beside the control plane's: the
//! **dispatcher** claims jobs under leases and runs each in the [`harness`], waking on exact
//! timers from the queue's state; the **cron** ticker enqueues due intervals (one instance
//! ticks, under PostgreSQL's advisory lock); the **listener** turns PostgreSQL notifications
//! from other instances into wake-ups.
//!
//! ```
//! let cx = floe_core::config::ConfigCx { file: "c.yaml", env: &|_| None };
//! let s: floe_sched::config::SchedSection = serde_saphyr::from_str(
//!     "deployments: [{name: nightly, code: {command: ./compact.sh},
//!       triggers: [{cron: {schedule: '0 2 * * *', timezone: Europe/Berlin}}]}]",
//! ).unwrap();
//! let v = floe_sched::config::validate(&cx, &s, None).unwrap();
//! assert_eq!(v.deployments[0].max_attempts, 3);
//! ```

pub mod config;
pub mod cron;
pub mod event;
pub mod harness;
pub mod http;
pub mod metrics;
mod otel;
pub mod queue;
pub mod store;
mod ticker;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cloudevents::Event;
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tracing::Instrument;

use config::{Deployment, SchedSettings, Trigger};
use floe_core::worker::{self, Activity, Board, Handle, Shutdown};
use queue::{Finished, Lease, NewJob, Queue, QueueError};

/// Unix ms now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The scheduler's shared state.
pub struct Scheduler {
    /// Settings.
    pub settings: SchedSettings,
    /// The queue.
    pub queue: Arc<dyn Queue>,
    /// Metrics.
    pub metrics: metrics::Metrics,
    wake: Arc<Notify>,
    slots: Arc<Semaphore>,
    /// Runs under way here: job id -> (deployment, attempt, generation, started ms).
    running: Mutex<BTreeMap<String, (String, i32, i64, i64)>>,
    /// Next fire per cron trigger key, as the ticker last computed it.
    next_fires: Mutex<BTreeMap<String, i64>>,
    host: String,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

impl Scheduler {
    /// Opens the queue's store.
    pub async fn open(settings: SchedSettings) -> Result<Arc<Self>, QueueError> {
        let host = host();
        let holder = format!("{host}/{}/{}", std::process::id(), &event::random_id()[..8]);
        let store = store::SqlStore::open(&settings.store, holder, host.clone()).await?;
        let metrics = metrics::Metrics::new().map_err(|e| QueueError(e.to_string()))?;
        Ok(Arc::new(Self {
            slots: Arc::new(Semaphore::new(settings.concurrency)),
            settings,
            queue: Arc::new(store),
            metrics,
            wake: Arc::new(Notify::new()),
            running: Mutex::new(BTreeMap::new()),
            next_fires: Mutex::new(BTreeMap::new()),
            host,
        }))
    }

    /// A deployment by name.
    pub fn deployment(&self, name: &str) -> Option<&Deployment> {
        self.settings.deployments.iter().find(|d| d.name == name)
    }

    fn job(&self, d: &Deployment, kind: &str, e: &Event, now: i64) -> Result<NewJob, QueueError> {
        Ok(NewJob {
            id: event::job_id(&d.name, e),
            deployment: d.name.clone(),
            trigger: kind.to_owned(),
            event: serde_json::to_string(e).map_err(|e| QueueError(e.to_string()))?,
            group: None,
            seq: now,
            due_ms: now,
            max_attempts: i32::try_from(d.max_attempts).unwrap_or(i32::MAX),
            accepted_ms: now,
        })
    }

    /// Persists one deployment's jobs of one trigger kind (a cron tick's intervals), counts
    /// the new ones, wakes the dispatcher; returns how many were new.
    pub async fn enqueue(&self, jobs: &[NewJob]) -> Result<usize, QueueError> {
        let n = self.queue.enqueue(jobs).await?;
        if let (Some(j), true) = (jobs.first(), n > 0) {
            let labels = [j.deployment.as_str(), j.trigger.as_str()];
            self.metrics
                .dispatched
                .with_label_values(&labels)
                .inc_by(n as u64);
            self.wake.notify_one();
        }
        Ok(n)
    }

    /// Persists one dispatch in its own span; counts it and wakes the dispatcher when new.
    async fn put(&self, j: &NewJob) -> Result<(), QueueError> {
        let span = tracing::info_span!("sched.dispatch", deployment = %j.deployment, trigger = %j.trigger, job = %j.id);
        let new = self
            .queue
            .enqueue(std::slice::from_ref(j))
            .instrument(span.clone())
            .await?
            > 0;
        span.in_scope(|| tracing::info!(new, "event persisted"));
        if new {
            let labels = [j.deployment.as_str(), j.trigger.as_str()];
            self.metrics.dispatched.with_label_values(&labels).inc();
            self.wake.notify_one();
        }
        Ok(())
    }

    /// An event for every deployment subscribed to it; the job ids, new or not.
    pub async fn submit(&self, e: &Event, kind: &str) -> Result<Vec<String>, QueueError> {
        let now = now_ms();
        let mut ids = Vec::new();
        for d in event::subscribers(&self.settings.deployments, e) {
            let j = self.job(d, kind, e, now)?;
            self.put(&j).await?;
            ids.push(j.id);
        }
        Ok(ids)
    }

    /// An event for one deployment (webhook, manual); its job id.
    pub async fn submit_to(
        &self,
        d: &Deployment,
        kind: &str,
        e: &Event,
    ) -> Result<String, QueueError> {
        let j = self.job(d, kind, e, now_ms())?;
        self.put(&j).await?;
        Ok(j.id)
    }

    /// The deployment whose webhook trigger has `path`, and its secret.
    pub fn hook(&self, path: &str) -> Option<(&Deployment, &Trigger)> {
        self.settings.deployments.iter().find_map(|d| {
            d.triggers.iter().find_map(|t| match t {
                Trigger::Webhook { path: p, .. } if p == path => Some((d, t)),
                _ => None,
            })
        })
    }

    /// Runs under way on this instance.
    pub fn running_count(&self) -> usize {
        self.running.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// What `floe-control status` shows of the scheduler.
    pub async fn status(&self) -> Value {
        let depth = self.queue.depth().await.map_err(|e| e.to_string());
        let fires = self
            .next_fires
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        let deployments: Vec<Value> = self
            .settings
            .deployments
            .iter()
            .map(|d| {
                let next: Vec<String> = fires
                    .iter()
                    .filter(|(k, _)| k.split('/').next() == Some(d.name.as_str()))
                    .map(|(_, t)| cron::Schedule::rfc3339(*t))
                    .collect();
                json!({"name": d.name, "triggers": d.triggers.len(), "next_fires": next})
            })
            .collect();
        let running: Vec<Value> = self
            .running
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(id, (d, a, g, s))| json!({"job": id, "deployment": d, "attempt": a, "generation": g, "started_ms": s}))
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "store": if self.settings.store.starts_with("sqlite") { "sqlite" } else { "postgres" },
            "deployments": deployments,
            "queue": match depth { Ok(d) => json!(d), Err(e) => json!({"error": e}) },
            "running": running,
        })
    }

    /// Starts the dispatcher, the cron ticker and the listener as named workers.
    pub fn spawn(self: &Arc<Self>, board: &Board, stop: &Shutdown) -> Vec<JoinHandle<()>> {
        let me = self.clone();
        let l = self.clone();
        let t = self.clone();
        let (h, th, lh) = (
            board.handle("dispatcher"),
            board.handle("cron"),
            board.handle("listener"),
        );
        let (s1, s2, s3) = (stop.clone(), stop.clone(), stop.clone());
        vec![
            worker::spawn(h.clone(), async move { me.dispatch_loop(h, s1).await }),
            worker::spawn(th.clone(), async move { ticker::run(t, th, s2).await }),
            worker::spawn(lh.clone(), async move {
                lh.set(Activity::Working, "listening for other instances");
                let mut s3 = s3;
                tokio::select! {
                    r = l.queue.listen(l.wake.clone()) => match r {
                        // SQLite: one instance per store, nothing to listen for.
                        Ok(()) => {
                            lh.set(Activity::Idle, "one instance (SQLite)");
                            let _ = s3.changed().await;
                        }
                        Err(e) => lh.error(e.to_string()),
                    },
                    _ = s3.changed() => {}
                }
            }),
        ]
    }

    /// Kills worker groups a crashed instance left on this host: open runs whose worker is
    /// still the process recorded and whose parent is no live floe-control (another instance
    /// on this host, started before this one in an upgrade, runs its own).
    async fn reap_orphans(&self) {
        if let Ok(pids) = self.queue.open_pids(&self.host).await {
            for (pid, ticks) in pids {
                if harness::has_live_scheduler(pid) {
                    continue;
                }
                harness::kill_group(pid, Some(ticks));
            }
        }
    }

    async fn dispatch_loop(self: Arc<Self>, h: Handle, mut stop: Shutdown) {
        self.reap_orphans().await;
        let lease_ms = i64::try_from(self.settings.lease.as_millis()).unwrap_or(30_000);
        loop {
            h.set(Activity::Working, "claiming");
            let mut failed = false;
            while let Ok(permit) = self.slots.clone().try_acquire_owned() {
                let now = now_ms();
                match self.queue.claim(now, now + lease_ms).await {
                    Ok(Some(l)) => {
                        let me = self.clone();
                        let stop = stop.clone();
                        tokio::spawn(async move {
                            me.run_one(l, stop).await;
                            drop(permit);
                            me.wake.notify_one();
                        });
                    }
                    Ok(None) => break,
                    Err(e) => {
                        h.error(e.to_string());
                        failed = true;
                        break;
                    }
                }
            }
            let wake = if failed {
                Some(now_ms() + 1000)
            } else if self.slots.available_permits() > 0 {
                self.queue
                    .next_wake()
                    .await
                    .unwrap_or(Some(now_ms() + 1000))
            } else {
                None
            };
            h.set(
                Activity::Idle,
                match wake {
                    Some(t) => format!("next at {}", cron::Schedule::rfc3339(t)),
                    None => "waiting".into(),
                },
            );
            h.done();
            let sleep = wake
                .map(|t| (t - now_ms()).clamp(5, 3_600_000))
                .unwrap_or(3_600_000);
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(u64::try_from(sleep).unwrap_or(5))) => {}
                _ = self.wake.notified() => {}
                _ = stop.changed() => break,
            }
        }
        // Let the runs under way see the stop, kill their workers and record it.
        let n = u32::try_from(self.settings.concurrency).unwrap_or(1);
        let _ = self.slots.acquire_many(n).await;
    }

    async fn run_one(&self, l: Lease, stop: Shutdown) {
        let Some(d) = self.deployment(&l.deployment).cloned() else {
            let o = queue::Outcome {
                result: "error",
                exit_code: None,
                log: format!("deployment {:?} is no longer configured", l.deployment),
                ended_ms: now_ms(),
            };
            let _ = self.queue.finish(&l, &o, None).await;
            return;
        };
        let started = now_ms();
        self.metrics
            .latency
            .observe((started - l.accepted_ms).max(0) as f64 / 1000.0);
        if let Ok(mut m) = self.running.lock() {
            m.insert(
                l.id.clone(),
                (d.name.clone(), l.attempt, l.generation, started),
            );
        }
        let span = tracing::info_span!("sched.run", deployment = %d.name, job = %l.id, attempt = l.attempt, generation = l.generation);
        let trace = crate::otel::run_trace(&l.event);
        let o = harness::run(
            &d,
            &l,
            trace.as_ref(),
            self.queue.as_ref(),
            self.settings.lease,
            stop,
        )
        .instrument(span.clone())
        .await;
        if let Some(t) = &trace {
            let r = crate::otel::RunSpan {
                deployment: &d.name,
                job: &l.id,
                attempt: l.attempt,
                generation: l.generation,
                result: o.result,
                exit_code: o.exit_code,
                start_ms: started,
                end_ms: o.ended_ms,
            };
            crate::otel::export_run(t, &r);
        }
        self.metrics
            .duration
            .observe((o.ended_ms - started).max(0) as f64 / 1000.0);
        self.metrics
            .runs
            .with_label_values(&[d.name.as_str(), o.result])
            .inc();
        let retry = (o.result != "ok" && o.result != "stopped")
            .then(|| queue::retry_at(now_ms(), l.attempt, d.backoff.as_millis() as u64));
        let finished = self
            .queue
            .finish(&l, &o, retry)
            .instrument(span.clone())
            .await;
        // Entered only for the logging below: no guard is held across an await.
        let _g = span.enter();
        match finished {
            Ok(Finished::Accepted) => {
                if let (true, Some(at)) = (l.attempt < l.max_attempts, retry) {
                    self.metrics
                        .retries
                        .with_label_values(&[d.name.as_str()])
                        .inc();
                    tracing::info!(retry_at = %cron::Schedule::rfc3339(at), "run will be retried");
                }
                tracing::info!(result = o.result, exit_code = ?o.exit_code, "run ended");
            }
            Ok(Finished::Stale) => {
                self.metrics
                    .stale
                    .with_label_values(&[d.name.as_str()])
                    .inc();
                tracing::warn!(
                    result = o.result,
                    "completion refused: the lease generation is stale"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not record the run's end; its lease will expire")
            }
        }
        if let Ok(mut m) = self.running.lock() {
            m.remove(&l.id);
        }
    }
}
