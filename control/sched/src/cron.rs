//! Cron schedules read in a time zone (croner + chrono-tz), and the Airflow-style intervals a
//! schedule hands its runs: fire times `t0 < t1 < ...` cut time into `[t_i, t_i+1)`; the run for
//! that interval starts at `t_i+1` and its logical date is `t_i`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde::Deserialize;

/// What a cron trigger does with intervals that ended before it was first seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Catchup {
    /// Each past interval, in order, one at a time.
    Sequential,
    /// Every past interval at once (bounded by the scheduler's concurrency).
    Parallel,
    /// None: the first run is the interval that ends next.
    #[default]
    None,
}

/// Past intervals enqueued in one tick at most, so a `start_date` years back on a per-second
/// schedule cannot flood the queue in one transaction; the rest follow on the next tick.
pub const MAX_PER_TICK: usize = 1000;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    /// The pattern as written.
    pub pattern: String,
    tz: Tz,
    start: Option<i64>,
    /// Catch-up policy.
    pub catchup: Catchup,
}

/// One interval `[start, end)`, unix ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Logical date and interval start.
    pub start: i64,
    /// Interval end (the run's fire time).
    pub end: i64,
}

/// Why a schedule was refused (each names what the operator wrote).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Not a cron pattern croner takes.
    #[error("schedule {pattern:?}: {reason}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// croner's reason.
        reason: String,
    },
    /// Not an IANA time zone.
    #[error("timezone {0:?}: not an IANA zone")]
    TimeZone(String),
    /// Not an RFC 3339 date.
    #[error("start_date {start:?}: {reason} (RFC 3339, e.g. 2026-01-01T00:00:00Z)")]
    StartDate {
        /// The date written.
        start: String,
        /// chrono's reason.
        reason: String,
    },
    /// A valid pattern with no fire time ahead.
    #[error("schedule {0:?} never fires")]
    NeverFires(String),
}

impl Schedule {
    /// Parses a pattern, a time-zone name (default UTC) and an RFC 3339 start date.
    pub fn new(
        pattern: &str,
        tz: Option<&str>,
        start: Option<&str>,
        catchup: Catchup,
    ) -> Result<Self, ScheduleError> {
        let cron = Cron::from_str(pattern).map_err(|e| ScheduleError::Pattern {
            pattern: pattern.to_owned(),
            reason: e.to_string(),
        })?;
        let tz = match tz {
            None => Tz::UTC,
            Some(n) => Tz::from_str(n).map_err(|_| ScheduleError::TimeZone(n.to_owned()))?,
        };
        let start = match start {
            None => None,
            Some(s) => Some(
                DateTime::parse_from_rfc3339(s)
                    .map_err(|e| ScheduleError::StartDate {
                        start: s.to_owned(),
                        reason: e.to_string(),
                    })?
                    .timestamp_millis(),
            ),
        };
        let s = Self {
            cron,
            pattern: pattern.to_owned(),
            tz,
            start,
            catchup,
        };
        if s.next_after(Utc::now().timestamp_millis()).is_none() {
            return Err(ScheduleError::NeverFires(pattern.to_owned()));
        }
        Ok(s)
    }

    /// The first fire time strictly after (or, when `inclusive`, at) `ms`, if any. croner runs
    /// behind `catch_unwind`: a panic in it (one was reported near DST changes) ends this
    /// schedule's search, not the scheduler.
    fn find(&self, ms: i64, inclusive: bool, forward: bool) -> Option<i64> {
        // Whole seconds: croner keeps the sub-second part of its input in what it returns.
        let at = self.tz.timestamp_opt(ms.div_euclid(1000), 0).single()?;
        let r = catch_unwind(AssertUnwindSafe(|| {
            if forward {
                self.cron.find_next_occurrence(&at, inclusive)
            } else {
                self.cron.find_previous_occurrence(&at, inclusive)
            }
        }));
        r.ok()?.ok().map(|t| t.timestamp_millis())
    }

    /// The next fire time after `ms`.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        self.find(ms, false, true)
    }

    /// Where a new trigger's cursor starts (the start of the first interval it will enqueue):
    /// the first fire at or after `start_date` when catching up, else the last fire at or
    /// before now (so the first run is the interval ending next).
    pub fn first_cursor(&self, now: i64) -> Option<i64> {
        match (self.catchup, self.start) {
            (Catchup::Sequential | Catchup::Parallel, Some(s)) => self.find(s, true, true),
            _ => self.find(now, true, false).or_else(|| self.next_after(now)),
        }
    }

    /// The intervals from `cursor` that have ended by `now` (at most [`MAX_PER_TICK`]), and
    /// the cursor after them.
    pub fn due(&self, cursor: i64, now: i64) -> (Vec<Interval>, i64) {
        let mut out = Vec::new();
        let mut at = cursor;
        while out.len() < MAX_PER_TICK {
            match self.next_after(at) {
                Some(end) if end <= now => {
                    out.push(Interval { start: at, end });
                    at = end;
                }
                _ => break,
            }
        }
        (out, at)
    }

    /// The last interval that has ended by `now` (what a conformance run replays by default).
    pub fn last_interval(&self, now: i64) -> Option<Interval> {
        let end = self.find(now, true, false)?;
        let start = self.find(end, false, false)?;
        Some(Interval { start, end })
    }

    /// RFC 3339 in UTC, for events and status.
    pub fn rfc3339(ms: i64) -> String {
        Utc.timestamp_millis_opt(ms)
            .single()
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn backfill_cuts_past_time_into_consecutive_intervals() {
        let s = Schedule::new(
            "0 * * * *",
            None,
            Some("2026-01-01T00:30:00Z"),
            Catchup::Sequential,
        )
        .unwrap();
        let c = s.first_cursor(ms("2026-01-01T05:10:00Z")).unwrap();
        assert_eq!(c, ms("2026-01-01T01:00:00Z"));
        let (iv, next) = s.due(c, ms("2026-01-01T05:10:00Z"));
        assert_eq!(iv.len(), 4);
        assert_eq!(
            iv[0],
            Interval {
                start: ms("2026-01-01T01:00:00Z"),
                end: ms("2026-01-01T02:00:00Z")
            }
        );
        assert!(iv.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(next, ms("2026-01-01T05:00:00Z"));
        // Nothing more is due until 06:00.
        assert!(s.due(next, ms("2026-01-01T05:59:59Z")).0.is_empty());
    }

    #[test]
    fn catchup_none_starts_with_the_interval_that_ends_next() {
        let s = Schedule::new(
            "*/10 * * * * *",
            None,
            Some("2020-01-01T00:00:00Z"),
            Catchup::None,
        )
        .unwrap();
        let now = ms("2026-01-01T00:00:25Z");
        let c = s.first_cursor(now).unwrap();
        assert_eq!(c, ms("2026-01-01T00:00:20Z"));
        assert!(s.due(c, now).0.is_empty());
        assert_eq!(s.due(c, ms("2026-01-01T00:00:30Z")).0.len(), 1);
    }

    #[test]
    fn a_daily_schedule_follows_its_time_zone_across_both_dst_changes() {
        // Europe/Berlin: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00.
        let s = Schedule::new("30 2 * * *", Some("Europe/Berlin"), None, Catchup::None).unwrap();
        let mut at = ms("2026-03-27T00:00:00Z");
        let mut fires = Vec::new();
        for _ in 0..4 {
            at = s.next_after(at).unwrap();
            fires.push(Schedule::rfc3339(at));
        }
        // 02:30 does not exist on the 29th: croner fires at the first instant after the gap.
        assert_eq!(
            fires,
            [
                "2026-03-27T01:30:00.000Z",
                "2026-03-28T01:30:00.000Z",
                "2026-03-29T01:00:00.000Z",
                "2026-03-30T00:30:00.000Z"
            ]
        );
        // 02:30 happens twice on 25 October: one fire, not two.
        let mut at = ms("2026-10-24T00:00:00Z");
        let mut fires = Vec::new();
        for _ in 0..3 {
            at = s.next_after(at).unwrap();
            fires.push(Schedule::rfc3339(at));
        }
        assert_eq!(
            fires,
            [
                "2026-10-24T00:30:00.000Z",
                "2026-10-25T00:30:00.000Z",
                "2026-10-26T01:30:00.000Z"
            ]
        );
    }

    #[test]
    fn fire_times_are_whole_seconds_whatever_the_clock_reads() {
        let s = Schedule::new("0 3 * * *", Some("Europe/Berlin"), None, Catchup::None).unwrap();
        assert_eq!(
            s.next_after(ms("2026-12-01T07:00:00.817Z")),
            Some(ms("2026-12-02T02:00:00Z"))
        );
        assert_eq!(
            s.first_cursor(ms("2026-12-01T07:00:00.817Z")),
            Some(ms("2026-12-01T02:00:00Z"))
        );
    }

    #[test]
    fn bad_patterns_zones_and_dates_are_refused_with_the_reason() {
        assert!(Schedule::new("61 * * * *", None, None, Catchup::None)
            .unwrap_err()
            .to_string()
            .contains("61 * * * *"));
        assert!(
            Schedule::new("* * * * *", Some("Mars/Olympus"), None, Catchup::None)
                .unwrap_err()
                .to_string()
                .contains("IANA")
        );
        assert!(
            Schedule::new("* * * * *", None, Some("yesterday"), Catchup::None)
                .unwrap_err()
                .to_string()
                .contains("RFC 3339")
        );
    }
}
