//! The scheduler queue's contract on a real store: SQLite always, PostgreSQL too when
//! `FLOE_TEST_PG_URL` names a server (tests/run.sh starts one).

#![allow(clippy::unwrap_used)]

use floe_sched::queue::{Finished, NewJob, Outcome, Queue};
use floe_sched::store::SqlStore;

fn job(id: &str, group: Option<&str>, seq: i64, due: i64) -> NewJob {
    NewJob {
        id: id.into(),
        deployment: "d".into(),
        trigger: "event".into(),
        event: "{}".into(),
        group: group.map(Into::into),
        seq,
        due_ms: due,
        max_attempts: 2,
        accepted_ms: due,
    }
}

fn ended(result: &'static str) -> Outcome {
    Outcome {
        result,
        exit_code: Some(0),
        log: String::new(),
        ended_ms: 0,
    }
}

/// A schema of its own on the test server for each test (they run in parallel).
async fn pg(base: &str, name: &str) -> String {
    use sqlx::{Connection, Executor};
    let mut c = sqlx::PgConnection::connect(base).await.unwrap();
    c.execute(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
    )))
    .await
    .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{name}")
}

async fn stores(name: &str) -> Vec<(SqlStore, SqlStore)> {
    let dir = tempfile::tempdir().unwrap().keep();
    let url = format!("sqlite://{}/q.db", dir.display());
    let mut out = vec![(
        SqlStore::open(&url, "a".into(), "h".into()).await.unwrap(),
        SqlStore::open(&url, "b".into(), "h".into()).await.unwrap(),
    )];
    if let Ok(base) = std::env::var("FLOE_TEST_PG_URL") {
        let url = pg(&base, name).await;
        out.push((
            SqlStore::open(&url, "a".into(), "h".into()).await.unwrap(),
            SqlStore::open(&url, "b".into(), "h".into()).await.unwrap(),
        ));
    }
    out
}

#[tokio::test]
async fn enqueue_is_idempotent_on_the_job_id() {
    for (q, _) in stores("enqueue_is_idempotent_on_the_job_id").await {
        assert_eq!(
            q.enqueue(&[job("x", None, 0, 0), job("x", None, 0, 0)])
                .await
                .unwrap(),
            1
        );
        assert_eq!(q.enqueue(&[job("x", None, 0, 0)]).await.unwrap(), 0);
        assert_eq!(q.depth().await.unwrap().ready, 1);
    }
}

#[tokio::test]
async fn a_stale_holder_cannot_finish_and_the_live_one_can() {
    for (a, b) in stores("a_stale_holder_cannot_finish_and_the_liv").await {
        a.enqueue(&[job("x", None, 0, 0)]).await.unwrap();
        let la = a.claim(10, 100).await.unwrap().unwrap();
        assert_eq!((la.attempt, la.generation), (1, 1));
        // Not claimable while the lease lives.
        assert!(b.claim(50, 150).await.unwrap().is_none());
        assert_eq!(a.next_wake().await.unwrap(), Some(100));
        // Expired: b takes it under generation 2; a's renewal and completion are refused.
        let lb = b.claim(100, 200).await.unwrap().unwrap();
        assert_eq!((lb.attempt, lb.generation), (2, 2));
        assert!(!a.renew("x", 1, 300).await.unwrap());
        assert_eq!(
            a.finish(&la, &ended("ok"), None).await.unwrap(),
            Finished::Stale
        );
        assert_eq!(
            b.finish(&lb, &ended("ok"), None).await.unwrap(),
            Finished::Accepted
        );
        let runs = a.runs(Some("d"), 10).await.unwrap();
        assert_eq!(runs.len(), 2);
        let old = runs.iter().find(|r| r.generation == 1).unwrap();
        assert_eq!(old.result.as_deref(), Some("lost"));
        assert!(old.note.contains("refused"), "{}", old.note);
        let new = runs.iter().find(|r| r.generation == 2).unwrap();
        assert_eq!(new.result.as_deref(), Some("ok"));
        assert_eq!(a.depth().await.unwrap().done, 1);
    }
}

#[tokio::test]
async fn a_failed_run_is_retried_at_its_time_until_attempts_run_out() {
    for (q, _) in stores("a_failed_run_is_retried_at_its_time_unti").await {
        q.enqueue(&[job("x", None, 0, 0)]).await.unwrap();
        let l = q.claim(0, 1000).await.unwrap().unwrap();
        assert_eq!(
            q.finish(&l, &ended("error"), Some(500)).await.unwrap(),
            Finished::Accepted
        );
        assert_eq!(q.next_wake().await.unwrap(), Some(500));
        assert!(q.claim(499, 2000).await.unwrap().is_none());
        let l = q.claim(500, 2000).await.unwrap().unwrap();
        assert_eq!(l.attempt, 2);
        q.finish(&l, &ended("error"), Some(900)).await.unwrap();
        assert_eq!(q.depth().await.unwrap().failed, 1);
        assert_eq!(q.next_wake().await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_group_runs_one_at_a_time_in_order() {
    for (q, _) in stores("a_group_runs_one_at_a_time_in_order").await {
        q.enqueue(&[
            job("c", Some("g"), 3, 0),
            job("a", Some("g"), 1, 0),
            job("b", Some("g"), 2, 0),
        ])
        .await
        .unwrap();
        let first = q.claim(0, 100).await.unwrap().unwrap();
        assert_eq!(first.id, "a");
        assert!(q.claim(0, 100).await.unwrap().is_none(), "b waits for a");
        q.finish(&first, &ended("ok"), None).await.unwrap();
        let second = q.claim(0, 100).await.unwrap().unwrap();
        assert_eq!(second.id, "b");
    }
}

#[tokio::test]
async fn cursors_persist() {
    for (q, other) in stores("cursors_persist").await {
        assert_eq!(q.cursor("k").await.unwrap(), None);
        q.set_cursor("k", 5).await.unwrap();
        q.set_cursor("k", 7).await.unwrap();
        assert_eq!(other.cursor("k").await.unwrap(), Some(7));
    }
}
