//! The durable queue's contract. Two backends: [`super::sqlite`] (embedded) and
//! [`super::postgres`] (several floe-control instances on one queue).
//!
//! A job is one dispatch of one deployment, keyed by a deterministic id (CloudEvent source +
//! id, or deployment + logical date for cron), so enqueueing it twice is one job. A consumer
//! claims a job under a lease: the claim bumps the job's generation and opens a run record.
//! Only the live generation can renew the lease or finish the run; a holder whose lease
//! expired (it crashed, or stalled past it) is refused and its completion recorded as refused.

use async_trait::async_trait;
use serde::Serialize;

/// Queue errors (the store's own message; the HTTP layer answers 503 with it).
#[derive(Debug, thiserror::Error)]
#[error("scheduler queue: {0}")]
pub struct QueueError(pub String);

impl From<sqlx::Error> for QueueError {
    fn from(e: sqlx::Error) -> Self {
        Self(e.to_string())
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, QueueError>;

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Deterministic id.
    pub id: String,
    /// Deployment name.
    pub deployment: String,
    /// `cron`, `webhook`, `event` or `manual`.
    pub trigger: String,
    /// The CloudEvent, structured-mode JSON.
    pub event: String,
    /// Jobs sharing a group run one at a time in `seq` order (sequential catch-up).
    pub group: Option<String>,
    /// Order within the group.
    pub seq: i64,
    /// Not before (unix ms).
    pub due_ms: i64,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When it was accepted (unix ms).
    pub accepted_ms: i64,
}

/// A claimed job.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Job id.
    pub id: String,
    /// Deployment.
    pub deployment: String,
    /// The CloudEvent JSON.
    pub event: String,
    /// 1-based attempt.
    pub attempt: i32,
    /// Lease generation.
    pub generation: i64,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When the job was accepted.
    pub accepted_ms: i64,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `ok`, `error` (non-zero exit), `timeout`, `lost` (lease lost while running), `spawn`
    /// (the program could not start) or `stopped` (this instance shut down: the job is queued
    /// again with its attempt given back).
    pub result: &'static str,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Captured stdout and stderr (tail).
    pub log: String,
    /// When it ended (unix ms).
    pub ended_ms: i64,
}

/// Whether a finish was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The live generation: recorded.
    Accepted,
    /// A stale generation: refused, noted on its run record.
    Stale,
}

/// One run record, as `floe-control runs` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// Job id.
    pub job_id: String,
    /// Deployment.
    pub deployment: String,
    /// Trigger kind.
    pub trigger: String,
    /// Attempt.
    pub attempt: i32,
    /// Lease generation.
    pub generation: i64,
    /// Who ran it.
    pub holder: String,
    /// When the job was accepted.
    pub accepted_ms: i64,
    /// Start (unix ms).
    pub started_ms: i64,
    /// End, once ended.
    pub ended_ms: Option<i64>,
    /// `ok`, `error`, `timeout`, `lost`, `spawn`; none while running.
    pub result: Option<String>,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Captured output.
    pub log: String,
    /// Notes: a refused stale completion, a retry time.
    pub note: String,
    /// The job's event.
    pub event: String,
}

/// Job counts by state.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Depth {
    /// Waiting (due or not).
    pub ready: i64,
    /// Claimed.
    pub running: i64,
    /// Finished ok.
    pub done: i64,
    /// Out of attempts.
    pub failed: i64,
}

/// The queue.
#[async_trait]
pub trait Queue: Send + Sync {
    /// Inserts jobs whose id is new; returns how many were new. Durable when it returns.
    async fn enqueue(&self, jobs: &[NewJob]) -> Result<usize>;
    /// Claims the next runnable job for `holder`: ready and due, or running with an expired
    /// lease (that run is recorded `lost`), and not behind an unfinished job of its group.
    /// Jobs out of attempts with an expired lease are failed instead.
    async fn claim(&self, now: i64, lease_until: i64) -> Result<Option<Lease>>;
    /// Extends the lease; false when the generation is no longer live.
    async fn renew(&self, id: &str, generation: i64, lease_until: i64) -> Result<bool>;
    /// Ends the run of `generation`. `retry_at` re-queues a failed run when attempts remain.
    async fn finish(
        &self,
        lease: &Lease,
        outcome: &Outcome,
        retry_at: Option<i64>,
    ) -> Result<Finished>;
    /// Records the worker's process id and start time (clock ticks since boot) on its run, so
    /// a restart of this instance on the same host can kill it if it outlived its parent.
    async fn set_pid(&self, id: &str, generation: i64, pid: i64, start: i64) -> Result<()>;
    /// The earliest time a job becomes claimable (a due time or a lease expiry), if any.
    async fn next_wake(&self) -> Result<Option<i64>>;
    /// Run records, newest first.
    async fn runs(&self, deployment: Option<&str>, limit: i64) -> Result<Vec<RunRecord>>;
    /// Jobs by state.
    async fn depth(&self) -> Result<Depth>;
    /// A cron trigger's cursor.
    async fn cursor(&self, key: &str) -> Result<Option<i64>>;
    /// Sets a cron trigger's cursor.
    async fn set_cursor(&self, key: &str, value: i64) -> Result<()>;
    /// Runs this host started whose record is still open, with their worker pids (orphans
    /// after a crash of this instance).
    async fn open_pids(&self, host: &str) -> Result<Vec<(i64, i64)>>;
    /// Returns once this instance is the one that ticks cron (PostgreSQL: an advisory lock
    /// held on its own connection; SQLite: at once).
    async fn ticker_lock(&self) -> Result<()>;
    /// Wakes `notify` whenever another instance enqueues or finishes (PostgreSQL
    /// LISTEN/NOTIFY); SQLite returns at once (one instance, which wakes itself).
    async fn listen(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> Result<()>;
}

/// The retry time after `attempt` failed: `backoff * 2^(attempt-1)`, at most 10 minutes.
pub fn retry_at(now: i64, attempt: i32, backoff_ms: u64) -> i64 {
    let exp = u32::try_from(attempt.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    let d = backoff_ms.saturating_mul(1 << exp).min(600_000);
    now.saturating_add(i64::try_from(d).unwrap_or(600_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_ten_minutes() {
        assert_eq!(retry_at(0, 1, 1000), 1000);
        assert_eq!(retry_at(0, 3, 1000), 4000);
        assert_eq!(retry_at(0, 40, 1000), 600_000);
    }
}
