//! Hedged origin reads: when a fill's ranged GET has not answered (response headers in) by the
//! origin's observed first-byte percentile, or by a configured bound, one more GET for the same
//! bytes (the same `If-Match`) goes out; the first answer wins and the other is dropped, its
//! connection closed. Hedges draw on a budget each read adds to, so they stay under a share of
//! reads even when the origin is slow for everyone (then hedging would only double its load).
//!
//! Written here rather than taken from a library: tower's `hedge` layer needs a tower
//! `Service` and keeps its own latency histogram per service; this is the same idea in the
//! few lines the origin reader needs, with the budget and percentile we expose as metrics.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use floe_core::OriginError;

/// Buckets of the first-byte histogram: bucket `i` holds latencies up to `BASE_US * GROWTH^i`
/// (0.25 ms to about 24 s in 20% steps).
const BUCKETS: usize = 64;
const BASE_US: f64 = 250.0;
const GROWTH: f64 = 1.2;
/// Answers seen before the observed percentile is trusted.
const WARMUP: u64 = 64;
/// The counts halve when they reach this, so the percentile follows the origin as it changes.
const WINDOW: u64 = 4096;
/// One hedge, in the budget's units (thousandths of a hedge).
const ONE: u64 = 1000;
/// Hedges that may go out back to back.
const BURST: u64 = 10 * ONE;

/// A hedging policy, validated (`origins.<name>.hedge`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// A fixed wait before hedging; `None`: the observed percentile.
    pub after: Option<Duration>,
    /// The percentile of observed first-byte latency, as a fraction (0.95).
    pub quantile: f64,
    /// Largest share of reads hedged.
    pub max_share: f64,
}

/// How one read went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered before it was late (or no percentile yet): no hedge.
    Answered,
    /// Late, but the budget was spent: no hedge.
    Refused,
    /// Hedged; `won` when the hedge's answer was the one used.
    Hedged {
        /// The hedge answered first.
        won: bool,
    },
}

impl Outcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Answered => "none",
            Self::Refused => "refused",
            Self::Hedged { won: true } => "won",
            Self::Hedged { won: false } => "lost",
        }
    }
}

/// One origin's hedging state: its first-byte histogram and hedge budget.
pub struct Hedge {
    policy: Policy,
    counts: [AtomicU64; BUCKETS],
    total: AtomicU64,
    budget: AtomicU64,
}

impl Hedge {
    /// A hedge with nothing observed and an empty budget.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            total: AtomicU64::new(0),
            budget: AtomicU64::new(0),
        }
    }

    fn bound(i: usize) -> Duration {
        Duration::from_micros((BASE_US * GROWTH.powi(i as i32)) as u64)
    }

    fn bucket(d: Duration) -> usize {
        let us = d.as_micros() as f64;
        if us <= BASE_US {
            return 0;
        }
        (((us / BASE_US).ln() / GROWTH.ln()).ceil() as usize).min(BUCKETS - 1)
    }

    /// Counts one answer's first-byte latency.
    pub fn observe(&self, d: Duration) {
        if let Some(c) = self.counts.get(Self::bucket(d)) {
            c.fetch_add(1, Relaxed);
        }
        if self.total.fetch_add(1, Relaxed) + 1 >= WINDOW {
            // Two reads may both halve: the window is then a little shorter, no more.
            let mut kept = 0;
            for c in &self.counts {
                let was = c
                    .fetch_update(Relaxed, Relaxed, |v| Some(v / 2))
                    .unwrap_or(0);
                kept += was / 2;
            }
            self.total.store(kept, Relaxed);
        }
    }

    /// How long a read waits before it is hedged: the configured bound, else the observed
    /// percentile once [`WARMUP`] answers are in (`None` before: no hedging yet).
    pub fn delay(&self) -> Option<Duration> {
        if let Some(a) = self.policy.after {
            return Some(a);
        }
        let total = self.total.load(Relaxed);
        if total < WARMUP {
            return None;
        }
        let want = ((total as f64) * self.policy.quantile).ceil() as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Relaxed);
            if seen >= want {
                return Some(Self::bound(i));
            }
        }
        Some(Self::bound(BUCKETS - 1))
    }

    fn credit(&self) {
        let add = (self.policy.max_share * ONE as f64) as u64;
        let _ = self
            .budget
            .fetch_update(Relaxed, Relaxed, |b| Some((b + add).min(BURST)));
    }

    fn take(&self) -> bool {
        self.budget
            .fetch_update(Relaxed, Relaxed, |b| b.checked_sub(ONE))
            .is_ok()
    }

    fn seen<T>(&self, r: &Result<T, OriginError>, t0: Instant) {
        if !matches!(r, Err(e) if retriable(e)) {
            self.observe(t0.elapsed());
        }
    }

    /// Runs `start()`, and once more when the first has not answered within [`Self::delay`]
    /// and the budget allows. The first answer wins; an origin failure (transport, 5xx) waits
    /// for the other, while a definite answer (412, 404) is taken as it comes. The loser is
    /// dropped.
    pub async fn run<T, F, Fut>(&self, mut start: F) -> (Result<T, OriginError>, Outcome)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, OriginError>>,
    {
        self.credit();
        let t0 = Instant::now();
        let first = start();
        tokio::pin!(first);
        let late = match self.delay() {
            Some(wait) => match tokio::time::timeout(wait, &mut first).await {
                Ok(r) => Err(r),
                Err(_) => Ok(()),
            },
            None => Err(first.as_mut().await),
        };
        if let Err(r) = late {
            self.seen(&r, t0);
            return (r, Outcome::Answered);
        }
        if !self.take() {
            let r = first.await;
            self.seen(&r, t0);
            return (r, Outcome::Refused);
        }
        let second = start();
        tokio::pin!(second);
        let (r, won) = tokio::select! {
            r = &mut first => match r {
                Err(e) if retriable(&e) => (second.await, true),
                r => (r, false),
            },
            r = &mut second => match r {
                Err(e) if retriable(&e) => (first.await, false),
                r => (r, true),
            },
        };
        // The first read took at least this long: counted so, the percentile stays honest.
        self.seen(&r, t0);
        (r, Outcome::Hedged { won })
    }
}

/// A failure another attempt may not share (a definite answer is the same from both).
fn retriable(e: &OriginError) -> bool {
    matches!(
        e,
        OriginError::Transport(_) | OriginError::Status(500..=599)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn policy(after_ms: Option<u64>, share: f64) -> Policy {
        Policy {
            after: after_ms.map(Duration::from_millis),
            quantile: 0.95,
            max_share: share,
        }
    }

    type Attempt = std::pin::Pin<Box<dyn Future<Output = Result<usize, OriginError>>>>;

    /// Attempt `n` (from 0) answers `Ok(n)` after `ms[n]` milliseconds; the first fails with
    /// `err` instead, when given. Also the count of attempts started.
    fn attempts(
        ms: &'static [u64],
        err: Option<OriginError>,
    ) -> (Arc<AtomicUsize>, impl FnMut() -> Attempt) {
        let n = Arc::new(AtomicUsize::new(0));
        let count = n.clone();
        let start = move || {
            let i = count.fetch_add(1, Relaxed);
            let err = err.clone();
            let wait = Duration::from_millis(ms.get(i).copied().unwrap_or(0));
            Box::pin(async move {
                tokio::time::sleep(wait).await;
                match (i, err) {
                    (0, Some(e)) => Err(e),
                    _ => Ok(i),
                }
            }) as Attempt
        };
        (n, start)
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_answering_in_time_is_not_hedged() {
        let h = Hedge::new(policy(Some(100), 1.0));
        let (n, start) = attempts(&[50], None);
        assert_eq!(h.run(start).await, (Ok(0), Outcome::Answered));
        assert_eq!(n.load(Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_read_is_hedged_and_the_first_answer_wins() {
        let h = Hedge::new(policy(Some(100), 1.0));
        let (n, start) = attempts(&[5_000, 20], None);
        let t0 = tokio::time::Instant::now();
        assert_eq!(h.run(start).await, (Ok(1), Outcome::Hedged { won: true }));
        assert_eq!(t0.elapsed(), Duration::from_millis(120));
        assert_eq!(n.load(Relaxed), 2);
        // The original may still win.
        h.credit();
        let (_, start) = attempts(&[150, 500], None);
        assert_eq!(h.run(start).await, (Ok(0), Outcome::Hedged { won: false }));
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_stay_within_the_budget() {
        let h = Hedge::new(policy(Some(10), 0.25));
        let mut hedged = 0;
        for _ in 0..40 {
            let (_, start) = attempts(&[1_000, 1], None);
            if matches!(h.run(start).await.1, Outcome::Hedged { .. }) {
                hedged += 1;
            }
        }
        assert_eq!(hedged, 10, "a quarter of 40 late reads");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_waits_for_its_hedge_but_a_changed_object_does_not() {
        let h = Hedge::new(policy(Some(10), 1.0));
        let (_, start) = attempts(&[50, 100], Some(OriginError::Transport("reset".into())));
        assert_eq!(h.run(start).await, (Ok(1), Outcome::Hedged { won: true }));
        h.credit();
        let (_, start) = attempts(&[50, 100], Some(OriginError::Changed));
        assert_eq!(
            h.run(start).await,
            (Err(OriginError::Changed), Outcome::Hedged { won: false })
        );
    }

    #[test]
    fn the_delay_is_the_observed_percentile_after_warmup() {
        let h = Hedge::new(policy(None, 0.05));
        for _ in 0..WARMUP - 1 {
            h.observe(Duration::from_millis(30));
        }
        assert_eq!(h.delay(), None);
        for _ in 0..37 {
            h.observe(Duration::from_millis(30));
        }
        for _ in 0..100 {
            h.observe(Duration::from_millis(31));
        }
        for _ in 0..10 {
            h.observe(Duration::from_secs(2));
        }
        // 210 answers, 10 slow: the 95th percentile is the 30-31 ms bucket's bound (<= 20% over).
        let d = h.delay().unwrap();
        assert!(
            d >= Duration::from_millis(31) && d <= Duration::from_millis(38),
            "{d:?}"
        );
    }

    #[test]
    fn the_histogram_forgets_as_it_goes() {
        let h = Hedge::new(policy(None, 0.05));
        for _ in 0..WINDOW {
            h.observe(Duration::from_secs(1));
        }
        assert!(h.total.load(Relaxed) <= WINDOW / 2);
        for _ in 0..WINDOW * 3 {
            h.observe(Duration::from_millis(5));
        }
        assert!(h.delay().unwrap() <= Duration::from_millis(6));
    }
}
