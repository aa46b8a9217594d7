//! Noticing that this process was away: frozen (SIGSTOP, a paused VM or container, a host that
//! stalled) long enough that the fleet may have told it things it never heard. Peers that
//! could not reach it meanwhile retry, but only after a backoff; a node back from away must
//! not answer from what it knew before until it has asked (write-back catches up on the
//! journal, the block cache on the keys forgotten meanwhile).
//!
//! A plain thread ticks every [`TICK`]; a tick that finds more than [`GAP`] since the one
//! before counts a return. A request that runs before the ticker does after a freeze sees the
//! stall itself (the last tick is old), so no request slips through between the thaw and the
//! ticker's next turn.
//!
//! ```
//! use floe_core::away::Away;
//! let away = Away::new();
//! away.tick_at(0, 1_000);
//! let mark = away.mark();
//! away.tick_at(100, 1_100);
//! assert_eq!(away.away_since(mark, 150), None);
//! away.tick_at(5_000, 6_000); // frozen for ~5 s
//! assert_eq!(away.away_since(mark, 5_010), Some(1_100));
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the ticker runs.
pub const TICK: Duration = Duration::from_millis(100);
/// A pause longer than this is an absence: ten ticks, far above a busy scheduler's jitter and
/// below the first retry a peer's missed message gets after [`TICK`]s of backoff.
pub const GAP: Duration = Duration::from_millis(1000);

/// The process's record of its absences.
#[derive(Debug)]
pub struct Away {
    started: Instant,
    /// Monotonic ms (since `started`) of the last tick.
    last_tick: AtomicU64,
    /// Wall-clock ms (Unix) of the last tick.
    last_wall: AtomicU64,
    /// Returns counted so far.
    returns: AtomicU64,
    /// Wall-clock ms of the last tick before the latest return: when that absence began.
    since: AtomicU64,
}

impl Default for Away {
    fn default() -> Self {
        Self::new()
    }
}

impl Away {
    /// A record with no ticks (tests drive it with [`Away::tick_at`]).
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            last_tick: AtomicU64::new(0),
            last_wall: AtomicU64::new(wall_ms()),
            returns: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }
    }

    /// The process's record, its ticker started on first use.
    pub fn global() -> &'static Away {
        static AWAY: OnceLock<Away> = OnceLock::new();
        AWAY.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("floe-away".into())
                .spawn(|| loop {
                    std::thread::sleep(TICK);
                    if let Some(away) = AWAY.get() {
                        away.tick_at(away.mono_ms(), wall_ms());
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "the away ticker did not start: absences go unnoticed");
            }
            let away = Away::new();
            away.last_tick.store(away.mono_ms(), Ordering::SeqCst);
            away
        })
    }

    /// Monotonic ms since this record was made.
    pub fn mono_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// One tick at monotonic `mono` and wall-clock `wall` ms.
    pub fn tick_at(&self, mono: u64, wall: u64) {
        let before = self.last_tick.load(Ordering::SeqCst);
        if mono.saturating_sub(before) > GAP.as_millis() as u64 {
            self.since
                .store(self.last_wall.load(Ordering::SeqCst), Ordering::SeqCst);
            // Counted before the tick moves on: whoever sees the new tick sees the return.
            self.returns.fetch_add(1, Ordering::SeqCst);
        }
        self.last_wall.store(wall, Ordering::SeqCst);
        self.last_tick.store(mono, Ordering::SeqCst);
    }

    /// What a consumer has handled: the returns counted so far.
    pub fn mark(&self) -> u64 {
        self.returns.load(Ordering::SeqCst)
    }

    /// When (wall-clock ms) the process went away, if it came back since `mark` was taken or
    /// is stalled right now (at monotonic `now`, the last tick is older than [`GAP`]).
    pub fn away_since(&self, mark: u64, now: u64) -> Option<u64> {
        let last = self.last_tick.load(Ordering::SeqCst);
        if now.saturating_sub(last) > GAP.as_millis() as u64 {
            return Some(self.last_wall.load(Ordering::SeqCst));
        }
        (self.returns.load(Ordering::SeqCst) != mark).then(|| self.since.load(Ordering::SeqCst))
    }

    /// As [`Away::away_since`], now.
    pub fn away_since_now(&self, mark: u64) -> Option<u64> {
        self.away_since(mark, self.mono_ms())
    }
}

/// Wall-clock ms since the Unix epoch (0 before it).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_ticks_are_no_absence() {
        let away = Away::new();
        let mark = away.mark();
        for i in 0..50 {
            away.tick_at(i * 100, 10_000 + i * 100);
            assert_eq!(away.away_since(mark, i * 100 + 50), None);
        }
    }

    #[test]
    fn a_stall_is_seen_before_the_ticker_runs_again() {
        let away = Away::new();
        away.tick_at(100, 2_000);
        let mark = away.mark();
        // Thawed: a request runs before the ticker.
        assert_eq!(away.away_since(mark, 3_000), Some(2_000));
        // The ticker then counts the return; a consumer that handled it moves its mark.
        away.tick_at(3_010, 4_910);
        assert_eq!(away.away_since(mark, 3_020), Some(2_000));
        let handled = away.mark();
        assert_eq!(away.away_since(handled, 3_020), None);
    }
}
