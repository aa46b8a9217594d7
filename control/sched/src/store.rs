//! The queue on SQL: one implementation over sqlx's `Any` driver for both backends, with the
//! few places they differ in [`Dialect`]. SQLite (embedded default): WAL, `synchronous=FULL`
//! so an acknowledged event survives power loss, one connection (claims serialise in-process;
//! one floe-control per file). PostgreSQL: `FOR UPDATE SKIP LOCKED` claims, `pg_notify` on
//! every enqueue and finish, LISTEN to wake, and an advisory lock for the single cron ticker.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Executor, Row};
use tokio::sync::Notify;

use super::queue::{Depth, Finished, Lease, NewJob, Outcome, Queue, QueueError, Result, RunRecord};

/// Which SQL engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

const SCHEMA: [&str; 5] = [
    "CREATE TABLE IF NOT EXISTS floe_jobs (id TEXT PRIMARY KEY, deployment TEXT NOT NULL,
     trigger_kind TEXT NOT NULL, event TEXT NOT NULL, grp TEXT, seq BIGINT NOT NULL,
     state TEXT NOT NULL, attempt BIGINT NOT NULL, generation BIGINT NOT NULL,
     due_ms BIGINT NOT NULL, lease_until_ms BIGINT NOT NULL, holder TEXT NOT NULL,
     max_attempts BIGINT NOT NULL, accepted_ms BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS floe_jobs_state ON floe_jobs (state, due_ms)",
    "CREATE INDEX IF NOT EXISTS floe_jobs_grp ON floe_jobs (grp, seq)",
    "CREATE TABLE IF NOT EXISTS floe_runs (job_id TEXT NOT NULL, generation BIGINT NOT NULL,
     attempt BIGINT NOT NULL, holder TEXT NOT NULL, host TEXT NOT NULL,
     started_ms BIGINT NOT NULL, ended_ms BIGINT, result TEXT, exit_code BIGINT,
     log TEXT NOT NULL, note TEXT NOT NULL, pid BIGINT, pid_start BIGINT,
     PRIMARY KEY (job_id, generation))",
    "CREATE TABLE IF NOT EXISTS floe_cursors (cursor_key TEXT PRIMARY KEY, cursor_value BIGINT NOT NULL)",
];

/// A job may run when it is not behind an unfinished job of its group.
const UNBLOCKED: &str =
    "(j.grp IS NULL OR NOT EXISTS (SELECT 1 FROM floe_jobs b WHERE b.grp = j.grp
    AND b.seq < j.seq AND b.state IN ('ready', 'running')))";

/// The queue on an SQL store.
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
    url: String,
    holder: String,
    host: String,
    /// The ticker's lock connection, held for the process's life once taken.
    lock: tokio::sync::Mutex<Option<sqlx::AnyConnection>>,
}

impl SqlStore {
    /// Connects (creating an SQLite file and its folder), and creates the tables.
    pub async fn open(url: &str, holder: String, host: String) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("sqlite:") {
            Dialect::Sqlite
        } else {
            Dialect::Postgres
        };
        let mut url = url.to_owned();
        let opts = AnyPoolOptions::new();
        let pool = if dialect == Dialect::Sqlite {
            let path = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:");
            let path = path.split('?').next().unwrap_or_default().to_owned();
            if let Some(dir) = std::path::Path::new(&path)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir)
                    .map_err(|e| QueueError(format!("{}: {e}", dir.display())))?;
            }
            if !url.contains('?') {
                url.push_str("?mode=rwc");
            }
            opts.max_connections(1)
                .after_connect(|c, _| {
                    Box::pin(async move {
                        c.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=10000")
                            .await
                            .map(|_| ())
                    })
                })
                .connect(&url)
                .await?
        } else {
            opts.max_connections(16).connect(&url).await?
        };
        let mut tx = pool.begin().await?;
        if dialect == Dialect::Postgres {
            // Two instances starting together must not race on CREATE TABLE.
            tx.execute("SELECT pg_advisory_xact_lock(7236114)").await?;
        }
        for s in SCHEMA {
            tx.execute(s).await?;
        }
        tx.commit().await?;
        Ok(Self {
            pool,
            dialect,
            url,
            holder,
            host,
            lock: tokio::sync::Mutex::new(None),
        })
    }

    /// Which engine.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// `$N` placeholders as each engine wants them (`?N` for SQLite).
    fn sql(&self, s: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(match self.dialect {
            Dialect::Postgres => s.to_owned(),
            Dialect::Sqlite => s.replace('$', "?"),
        })
    }

    async fn notify(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<()> {
        if self.dialect == Dialect::Postgres {
            tx.execute("SELECT pg_notify('floe_sched', '')").await?;
        }
        Ok(())
    }
}

fn get_i64(r: &AnyRow, c: &str) -> Result<i64> {
    Ok(r.try_get::<i64, _>(c)?)
}

fn lease(r: &AnyRow) -> Result<Lease> {
    Ok(Lease {
        id: r.try_get("id")?,
        deployment: r.try_get("deployment")?,
        event: r.try_get("event")?,
        attempt: i32::try_from(get_i64(r, "attempt")?).unwrap_or(i32::MAX),
        generation: get_i64(r, "generation")?,
        max_attempts: i32::try_from(get_i64(r, "max_attempts")?).unwrap_or(i32::MAX),
        accepted_ms: get_i64(r, "accepted_ms")?,
    })
}

fn run(r: &AnyRow) -> Result<RunRecord> {
    let opt = |c: &str| -> Result<Option<i64>> { Ok(r.try_get::<Option<i64>, _>(c)?) };
    Ok(RunRecord {
        job_id: r.try_get("job_id")?,
        deployment: r.try_get("deployment")?,
        trigger: r.try_get("trigger_kind")?,
        attempt: i32::try_from(get_i64(r, "attempt")?).unwrap_or(i32::MAX),
        generation: get_i64(r, "generation")?,
        holder: r.try_get("holder")?,
        accepted_ms: get_i64(r, "accepted_ms")?,
        started_ms: get_i64(r, "started_ms")?,
        ended_ms: opt("ended_ms")?,
        result: r.try_get("result")?,
        exit_code: opt("exit_code")?.and_then(|c| i32::try_from(c).ok()),
        log: r.try_get("log")?,
        note: r.try_get("note")?,
        event: r.try_get("event")?,
    })
}

#[async_trait]
impl Queue for SqlStore {
    async fn enqueue(&self, jobs: &[NewJob]) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let mut new = 0;
        let q = |s: &Self| {
            s.sql(
            "INSERT INTO floe_jobs (id, deployment, trigger_kind, event, grp, seq, state, attempt,
             generation, due_ms, lease_until_ms, holder, max_attempts, accepted_ms)
             VALUES ($1, $2, $3, $4, $5, $6, 'ready', 0, 0, $7, 0, '', $8, $9)
             ON CONFLICT (id) DO NOTHING",
        )
        };
        for j in jobs {
            let r = sqlx::query(q(self))
                .bind(&j.id)
                .bind(&j.deployment)
                .bind(&j.trigger)
                .bind(&j.event)
                .bind(j.group.clone())
                .bind(j.seq)
                .bind(j.due_ms)
                .bind(i64::from(j.max_attempts))
                .bind(j.accepted_ms)
                .execute(&mut *tx)
                .await?;
            new += usize::try_from(r.rows_affected()).unwrap_or(0);
        }
        if new > 0 {
            self.notify(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(new)
    }

    async fn claim(&self, now: i64, lease_until: i64) -> Result<Option<Lease>> {
        let mut tx = self.pool.begin().await?;
        // Expired leases out of attempts: failed, their runs lost.
        let gone = sqlx::query(self.sql(
            "UPDATE floe_jobs SET state = 'failed', holder = '' WHERE state = 'running'
             AND lease_until_ms <= $1 AND attempt >= max_attempts RETURNING id",
        ))
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        for g in &gone {
            let id: String = g.try_get("id")?;
            sqlx::query(self.sql(
                "UPDATE floe_runs SET result = 'lost', ended_ms = $2,
                 note = note || 'lease expired with no attempts left; ' WHERE job_id = $1 AND ended_ms IS NULL",
            ))
            .bind(&id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let lock = if self.dialect == Dialect::Postgres {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let claim = format!(
            "UPDATE floe_jobs SET state = 'running', attempt = attempt + 1,
             generation = generation + 1, holder = $1, lease_until_ms = $3
             WHERE id = (SELECT j.id FROM floe_jobs j WHERE ((j.state = 'ready' AND j.due_ms <= $2)
               OR (j.state = 'running' AND j.lease_until_ms <= $2)) AND {UNBLOCKED}
               ORDER BY j.due_ms, j.seq LIMIT 1{lock})
             RETURNING id, deployment, event, attempt, generation, max_attempts, accepted_ms"
        );
        let row = sqlx::query(self.sql(&claim))
            .bind(&self.holder)
            .bind(now)
            .bind(lease_until)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.commit().await?;
            return Ok(None);
        };
        let l = lease(&row)?;
        sqlx::query(self.sql(
            "UPDATE floe_runs SET result = 'lost', ended_ms = $2,
             note = note || 'lease expired; retried under generation ' || $3 || '; '
             WHERE job_id = $1 AND ended_ms IS NULL",
        ))
        .bind(&l.id)
        .bind(now)
        .bind(l.generation.to_string())
        .execute(&mut *tx)
        .await?;
        sqlx::query(self.sql(
            "INSERT INTO floe_runs (job_id, generation, attempt, holder, host, started_ms, log, note)
             VALUES ($1, $2, $3, $4, $5, $6, '', '')",
        ))
        .bind(&l.id)
        .bind(l.generation)
        .bind(i64::from(l.attempt))
        .bind(&self.holder)
        .bind(&self.host)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(l))
    }

    async fn renew(&self, id: &str, generation: i64, lease_until: i64) -> Result<bool> {
        let r = sqlx::query(self.sql(
            "UPDATE floe_jobs SET lease_until_ms = $3 WHERE id = $1 AND generation = $2 AND state = 'running'",
        ))
        .bind(id)
        .bind(generation)
        .bind(lease_until)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn finish(&self, l: &Lease, o: &Outcome, retry_at: Option<i64>) -> Result<Finished> {
        let mut tx = self.pool.begin().await?;
        // A graceful stop is this instance's doing, not the run's: the job is queued again at
        // once with its attempt given back, so a rolling restart fails no `retries: 0` job.
        let (state, due, given_back) = match (o.result, retry_at) {
            ("ok", _) => ("done", 0, 0_i64),
            ("stopped", _) => ("ready", o.ended_ms, 1),
            (_, Some(at)) if l.attempt < l.max_attempts => ("ready", at, 0),
            _ => ("failed", 0, 0),
        };
        let r = sqlx::query(self.sql(
            "UPDATE floe_jobs SET state = $3, due_ms = $4, attempt = attempt - $5, holder = '',
             lease_until_ms = 0 WHERE id = $1 AND generation = $2 AND state = 'running'",
        ))
        .bind(&l.id)
        .bind(l.generation)
        .bind(state)
        .bind(due)
        .bind(given_back)
        .execute(&mut *tx)
        .await?;
        let accepted = r.rows_affected() == 1;
        let note = match (accepted, state, given_back) {
            (false, _, _) => format!(
                "completion ({}) refused: generation {} is stale; ",
                o.result, l.generation
            ),
            (true, _, 1) => "stopped by a shutdown: queued again, attempt given back; ".into(),
            (true, "ready", _) => format!("retry at {}; ", super::cron::Schedule::rfc3339(due)),
            _ => String::new(),
        };
        sqlx::query(self.sql(
            "UPDATE floe_runs SET ended_ms = COALESCE(ended_ms, $3), result = COALESCE(result, $4),
             exit_code = $5, log = $6, note = note || $7 WHERE job_id = $1 AND generation = $2",
        ))
        .bind(&l.id)
        .bind(l.generation)
        .bind(o.ended_ms)
        .bind(o.result)
        .bind(o.exit_code.map(i64::from))
        .bind(&o.log)
        .bind(note)
        .execute(&mut *tx)
        .await?;
        self.notify(&mut tx).await?;
        tx.commit().await?;
        Ok(if accepted {
            Finished::Accepted
        } else {
            Finished::Stale
        })
    }

    async fn set_pid(&self, id: &str, generation: i64, pid: i64, start: i64) -> Result<()> {
        sqlx::query(self.sql(
            "UPDATE floe_runs SET pid = $3, pid_start = $4 WHERE job_id = $1 AND generation = $2",
        ))
        .bind(id)
        .bind(generation)
        .bind(pid)
        .bind(start)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn next_wake(&self) -> Result<Option<i64>> {
        let q = format!(
            "SELECT MIN(CASE WHEN j.state = 'ready' THEN j.due_ms ELSE j.lease_until_ms END) AS t
             FROM floe_jobs j WHERE j.state IN ('ready', 'running') AND {UNBLOCKED}"
        );
        let row = sqlx::query(self.sql(&q)).fetch_one(&self.pool).await?;
        Ok(row.try_get::<Option<i64>, _>("t")?)
    }

    async fn runs(&self, deployment: Option<&str>, limit: i64) -> Result<Vec<RunRecord>> {
        let rows = sqlx::query(self.sql(
            "SELECT r.job_id, j.deployment, j.trigger_kind, r.attempt, r.generation, r.holder,
             j.accepted_ms, r.started_ms, r.ended_ms, r.result, r.exit_code, r.log, r.note, j.event
             FROM floe_runs r JOIN floe_jobs j ON j.id = r.job_id
             WHERE ($1 = '' OR j.deployment = $1) ORDER BY r.started_ms DESC, r.generation DESC LIMIT $2",
        ))
        .bind(deployment.unwrap_or(""))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run).collect()
    }

    async fn depth(&self) -> Result<Depth> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM floe_jobs GROUP BY state")
            .fetch_all(&self.pool)
            .await?;
        let mut d = Depth::default();
        for r in rows {
            let n = get_i64(&r, "n")?;
            match r.try_get::<String, _>("state")?.as_str() {
                "ready" => d.ready = n,
                "running" => d.running = n,
                "done" => d.done = n,
                _ => d.failed += n,
            }
        }
        Ok(d)
    }

    async fn cursor(&self, key: &str) -> Result<Option<i64>> {
        let r =
            sqlx::query(self.sql("SELECT cursor_value FROM floe_cursors WHERE cursor_key = $1"))
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
        r.map(|r| get_i64(&r, "cursor_value")).transpose()
    }

    async fn set_cursor(&self, key: &str, value: i64) -> Result<()> {
        sqlx::query(self.sql(
            "INSERT INTO floe_cursors (cursor_key, cursor_value) VALUES ($1, $2)
             ON CONFLICT (cursor_key) DO UPDATE SET cursor_value = excluded.cursor_value",
        ))
        .bind(key)
        .bind(value)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn open_pids(&self, host: &str) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query(self.sql(
            "SELECT pid, pid_start FROM floe_runs WHERE host = $1 AND pid IS NOT NULL AND ended_ms IS NULL",
        ))
        .bind(host)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((get_i64(r, "pid")?, get_i64(r, "pid_start")?)))
            .collect()
    }

    async fn ticker_lock(&self) -> Result<()> {
        if self.dialect == Dialect::Sqlite {
            return Ok(());
        }
        let mut held = self.lock.lock().await;
        if held.is_none() {
            use sqlx::Connection;
            let mut c = sqlx::AnyConnection::connect(&self.url).await?;
            // Blocks until the instance holding it goes (its connection closes): no polling.
            c.execute("SELECT pg_advisory_lock(7236115)").await?;
            *held = Some(c);
        }
        Ok(())
    }

    async fn listen(&self, notify: Arc<Notify>) -> Result<()> {
        if self.dialect == Dialect::Sqlite {
            return Ok(());
        }
        let mut l = sqlx::postgres::PgListener::connect(&self.url).await?;
        l.listen("floe_sched").await?;
        loop {
            l.recv().await?;
            notify.notify_one();
        }
    }
}
