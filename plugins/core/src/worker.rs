//! Named background workers with a shutdown signal and a visible state (what `status` shows).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{mpsc, watch};

/// A worker's activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Activity {
    /// Not run yet.
    #[default]
    Starting,
    /// Waiting for work or the next tick.
    Idle,
    /// Doing work (the detail says which).
    Working,
    /// Waiting after an error.
    Backoff,
    /// Shut down.
    Stopped,
}

/// What a worker is doing, as `status` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerState {
    /// Its activity.
    pub state: Activity,
    /// Free text: the table being warmed, the error being backed off from...
    pub detail: String,
    /// The last error, if any, and when (unix seconds).
    pub last_error: Option<(u64, String)>,
    /// Completed iterations.
    pub runs: u64,
}

/// Every worker's state by name.
#[derive(Debug, Clone, Default)]
pub struct Board(Arc<RwLock<BTreeMap<&'static str, WorkerState>>>);

impl Board {
    /// A handle for worker `name`.
    pub fn handle(&self, name: &'static str) -> Handle {
        self.update(name, |s| s.state = Activity::Starting);
        Handle {
            name,
            board: self.clone(),
        }
    }

    fn update(&self, name: &'static str, f: impl FnOnce(&mut WorkerState)) {
        if let Ok(mut m) = self.0.write() {
            f(m.entry(name).or_default());
        }
    }

    /// A copy of every worker's state.
    pub fn snapshot(&self) -> BTreeMap<&'static str, WorkerState> {
        self.0.read().map(|m| m.clone()).unwrap_or_default()
    }
}

/// One worker's view of the board.
#[derive(Debug, Clone)]
pub struct Handle {
    name: &'static str,
    board: Board,
}

impl Handle {
    /// Sets the state and detail.
    pub fn set(&self, state: Activity, detail: impl Into<String>) {
        let detail = detail.into();
        self.board.update(self.name, |s| {
            s.state = state;
            s.detail = detail;
        });
    }

    /// Counts a completed iteration and goes idle.
    pub fn done(&self) {
        self.board.update(self.name, |s| {
            s.runs += 1;
            s.state = Activity::Idle;
            s.detail.clear();
        });
    }

    /// Records an error (and logs it).
    pub fn error(&self, e: impl std::fmt::Display) {
        let text = e.to_string();
        tracing::warn!(worker = self.name, error = %text);
        self.board
            .update(self.name, |s| s.last_error = Some((now_secs(), text)));
    }
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Shutdown signal: flips to true once.
pub type Shutdown = watch::Receiver<bool>;

/// Waits `d` or until shutdown; returns true when shutting down.
pub async fn pause(shutdown: &mut Shutdown, d: Duration) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        r = shutdown.changed() => r.is_err() || *shutdown.borrow(),
    }
}

/// Runs `each` on every job from `rx`, one at a time, until shutdown or the senders are gone;
/// the worker shows `idle` between jobs.
pub async fn drain<T, F, Fut>(
    h: &Handle,
    rx: &mut mpsc::Receiver<T>,
    stop: &mut Shutdown,
    mut each: F,
) where
    F: FnMut(T) -> Fut,
    Fut: Future<Output = ()>,
{
    h.done();
    loop {
        let job = tokio::select! {
            j = rx.recv() => j,
            _ = stop.changed() => None,
        };
        let Some(job) = job else { return };
        each(job).await;
        h.done();
    }
}

/// Spawns worker `name`; its state reads `stopped` once the future returns.
pub fn spawn<F>(handle: Handle, fut: F) -> tokio::task::JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        fut.await;
        handle.set(Activity::Stopped, "");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn states_are_visible_and_pause_stops_on_shutdown() {
        let board = Board::default();
        let h = board.handle("w");
        assert_eq!(board.snapshot()["w"].state, Activity::Starting);
        h.set(Activity::Working, "t1");
        h.error("boom");
        h.done();
        let s = &board.snapshot()["w"];
        assert_eq!((s.state, s.runs), (Activity::Idle, 1));
        assert_eq!(s.last_error.as_ref().map(|e| e.1.as_str()), Some("boom"));
        let (tx, mut rx) = watch::channel(false);
        let task = spawn(h, async move {
            while !pause(&mut rx, Duration::from_secs(3600)).await {}
        });
        tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(board.snapshot()["w"].state, Activity::Stopped);
    }
}
