//! The cron ticker: enqueues each cron trigger's intervals as they end, backfilling past ones
//! per its catch-up policy, and sleeps until the earliest next fire. Each trigger's cursor (the
//! start of the next interval to enqueue) is stored in the queue after its jobs, so a crash in
//! between re-enqueues the same ids: nothing is lost and nothing runs twice.

use std::sync::Arc;
use std::time::Duration;

use super::config::Trigger;
use super::cron::{Catchup, Schedule};
use super::queue::{NewJob, QueueError};
use super::{event, now_ms, Scheduler};
use floe_core::worker::{Activity, Handle, Shutdown};

/// One cron trigger: its key in the cursor table, its deployment and schedule.
struct Cron {
    key: String,
    deployment: usize,
    index: usize,
    schedule: Schedule,
    cursor: Option<i64>,
}

fn crons(s: &Scheduler) -> Vec<Cron> {
    let mut out = Vec::new();
    for (di, d) in s.settings.deployments.iter().enumerate() {
        for (ti, t) in d.triggers.iter().enumerate() {
            if let Trigger::Cron(schedule) = t {
                out.push(Cron {
                    key: format!("{}/{ti}/{}", d.name, schedule.pattern),
                    deployment: di,
                    index: ti,
                    schedule: (**schedule).clone(),
                    cursor: None,
                });
            }
        }
    }
    out
}

/// Enqueues what is due for one trigger; returns its next fire time.
async fn tick(s: &Scheduler, c: &mut Cron, now: i64) -> Result<Option<i64>, QueueError> {
    let cursor = match c.cursor {
        Some(v) => v,
        None => match s.queue.cursor(&c.key).await? {
            Some(v) => v,
            None => {
                let Some(v) = c.schedule.first_cursor(now) else {
                    return Ok(None);
                };
                s.queue.set_cursor(&c.key, v).await?;
                v
            }
        },
    };
    let (mut due, next_cursor) = c.schedule.due(cursor, now);
    if c.schedule.catchup == Catchup::None && due.len() > 1 {
        // Downtime with catch-up off: only the latest interval runs.
        due.drain(..due.len() - 1);
    }
    if !due.is_empty() {
        let d = &s.settings.deployments[c.deployment];
        let mut jobs = Vec::with_capacity(due.len());
        for iv in due {
            let e =
                event::cron(d, c.index, &c.schedule, iv).map_err(|e| QueueError(e.to_string()))?;
            jobs.push(NewJob {
                id: event::job_id(&d.name, &e),
                deployment: d.name.clone(),
                trigger: "cron".into(),
                event: serde_json::to_string(&e).map_err(|e| QueueError(e.to_string()))?,
                group: (c.schedule.catchup == Catchup::Sequential).then(|| c.key.clone()),
                seq: iv.start,
                due_ms: now,
                max_attempts: i32::try_from(d.max_attempts).unwrap_or(i32::MAX),
                accepted_ms: now,
            });
        }
        s.enqueue(&jobs).await?;
        s.queue.set_cursor(&c.key, next_cursor).await?;
    }
    c.cursor = Some(next_cursor);
    Ok(c.schedule.next_after(next_cursor))
}

/// Runs the ticker until shutdown.
pub async fn run(s: Arc<Scheduler>, h: Handle, mut stop: Shutdown) {
    let mut crons = crons(&s);
    if crons.is_empty() {
        h.set(Activity::Idle, "no cron triggers");
        let _ = stop.changed().await;
        return;
    }
    h.set(Activity::Idle, "waiting to be the instance that ticks cron");
    tokio::select! {
        r = s.queue.ticker_lock() => if let Err(e) = r {
            h.error(e.to_string());
            return;
        },
        _ = stop.changed() => return,
    }
    loop {
        h.set(Activity::Working, "enqueueing due intervals");
        let now = now_ms();
        let mut earliest = i64::MAX;
        let mut failed = false;
        for c in &mut crons {
            match tick(&s, c, now).await {
                Ok(Some(t)) => {
                    earliest = earliest.min(t);
                    if let Ok(mut m) = s.next_fires.lock() {
                        m.insert(c.key.clone(), t);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    h.error(e.to_string());
                    failed = true;
                }
            }
        }
        h.done();
        let wait = if failed {
            1000
        } else {
            (earliest.saturating_sub(now_ms())).clamp(0, 3_600_000)
        };
        h.set(
            Activity::Idle,
            format!("next fire at {}", Schedule::rfc3339(now_ms() + wait)),
        );
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))) => {}
            _ = stop.changed() => return,
        }
    }
}
