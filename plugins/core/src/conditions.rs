//! Conditional reads (`If-Match`, `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`)
//! evaluated against a version a stage holds, as S3 (and MinIO, which the tests compare with)
//! evaluates them:
//!
//! 1. `If-None-Match` names the version: 304.
//! 2. `If-Modified-Since` is not before the version's Last-Modified: 304 (S3: If-None-Match
//!    false + If-Modified-Since true is 304).
//! 3. `If-Match` does not name the version: 412.
//! 4. Only without `If-Match`: `If-Unmodified-Since` before the Last-Modified: 412 (S3:
//!    If-Match true + If-Unmodified-Since false is 200).
//!
//! A tag names the version when it equals its ETag once surrounding quotes are dropped, or is
//! `*`. The value is one tag, not a list, and a weak tag (`W/"a"`) names no S3 version (S3
//! ETags are strong). A date that does not parse as an HTTP date is ignored, as S3 ignores it.

use std::time::SystemTime;

/// The conditional headers of one read, owned (they outlive the borrowed request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    if_match: Option<Box<str>>,
    if_none_match: Option<Box<str>>,
    if_modified_since: Option<SystemTime>,
    if_unmodified_since: Option<SystemTime>,
}

/// What a read's conditions decide for a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Serve the read (200/206).
    Proceed,
    /// 304 Not Modified, headers only.
    NotModified,
    /// 412 PreconditionFailed; `by_if_match`: the client named a version (an ETag) other than
    /// the one held, which a newer version at the origin could satisfy.
    PreconditionFailed {
        /// Failed on `If-Match` (rather than on `If-Unmodified-Since`).
        by_if_match: bool,
    },
}

impl Conditions {
    /// The conditions in `headers`; empty (and allocation-free) when there are none.
    pub fn of(headers: &http::HeaderMap) -> Self {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(Box::<str>::from)
        };
        let date = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| httpdate::parse_http_date(v.trim()).ok())
        };
        if !CONDITION_HEADERS.iter().any(|h| headers.contains_key(*h)) {
            return Self::default();
        }
        Self {
            if_match: text("if-match"),
            if_none_match: text("if-none-match"),
            if_modified_since: date("if-modified-since"),
            if_unmodified_since: date("if-unmodified-since"),
        }
    }

    /// No condition to evaluate.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Whether the read may be answered 304 (it has `If-None-Match` or `If-Modified-Since`):
    /// a cache that must resolve the version first does so without fetching the body.
    pub fn may_not_modify(&self) -> bool {
        self.if_none_match.is_some() || self.if_modified_since.is_some()
    }

    /// The verdict for the version `etag` (as sent on the wire, quoted) last modified at
    /// `last_modified` (`None`: unknown, date conditions are not evaluated).
    pub fn evaluate(&self, etag: &str, last_modified: Option<SystemTime>) -> Verdict {
        let not_after = |t: SystemTime| last_modified.is_some_and(|m| m <= t);
        if self
            .if_none_match
            .as_deref()
            .is_some_and(|t| names(t, etag))
        {
            return Verdict::NotModified;
        }
        if self.if_modified_since.is_some_and(not_after) {
            return Verdict::NotModified;
        }
        match &self.if_match {
            Some(t) if !names(t, etag) => Verdict::PreconditionFailed { by_if_match: true },
            Some(_) => Verdict::Proceed,
            None => match self.if_unmodified_since {
                Some(t) if last_modified.is_some() && !not_after(t) => {
                    Verdict::PreconditionFailed { by_if_match: false }
                }
                _ => Verdict::Proceed,
            },
        }
    }
}

/// The four conditional request headers, lowercase.
pub const CONDITION_HEADERS: [&str; 4] = [
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

/// Whether the client's tag `tag` names the version `etag`: `*`, or equal once surrounding
/// quotes are dropped.
fn names(tag: &str, etag: &str) -> bool {
    tag == "*" || (!tag.is_empty() && tag.trim_matches('"') == etag.trim_matches('"'))
}

#[cfg(test)]
mod tests {
    use super::{Conditions, Verdict};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    const ETAG: &str = "\"abc\"";
    /// The held version's Last-Modified: Tue, 01 Dec 2026 12:00:00 GMT.
    const MODIFIED: &str = "Tue, 01 Dec 2026 12:00:00 GMT";
    const BEFORE: &str = "Tue, 01 Dec 2026 11:59:59 GMT";
    const AFTER: &str = "Tue, 01 Dec 2026 12:00:01 GMT";

    fn modified() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_126_400)
    }

    fn verdict(headers: &[(&str, &str)]) -> Verdict {
        let mut h = http::HeaderMap::new();
        for (k, v) in headers {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Conditions::of(&h).evaluate(ETAG, Some(modified()))
    }

    const FAIL_MATCH: Verdict = Verdict::PreconditionFailed { by_if_match: true };
    const FAIL_DATE: Verdict = Verdict::PreconditionFailed { by_if_match: false };
    use Verdict::{NotModified as NM, Proceed as OK};

    #[test]
    fn the_held_dates_second_is_the_fixture() {
        assert_eq!(httpdate::parse_http_date(MODIFIED).unwrap(), modified());
    }

    #[test]
    fn each_condition_alone() {
        assert_eq!(verdict(&[]), OK);
        assert_eq!(verdict(&[("if-match", ETAG)]), OK);
        assert_eq!(verdict(&[("if-match", "abc")]), OK, "quotes are optional");
        assert_eq!(verdict(&[("if-match", "\"x\"")]), FAIL_MATCH);
        assert_eq!(verdict(&[("if-none-match", ETAG)]), NM);
        assert_eq!(verdict(&[("if-none-match", "\"x\"")]), OK);
        assert_eq!(verdict(&[("if-modified-since", MODIFIED)]), NM);
        assert_eq!(verdict(&[("if-modified-since", AFTER)]), NM);
        assert_eq!(verdict(&[("if-modified-since", BEFORE)]), OK);
        assert_eq!(verdict(&[("if-unmodified-since", MODIFIED)]), OK);
        assert_eq!(verdict(&[("if-unmodified-since", AFTER)]), OK);
        assert_eq!(verdict(&[("if-unmodified-since", BEFORE)]), FAIL_DATE);
    }

    #[test]
    fn s3s_documented_precedence() {
        // If-Match true + If-Unmodified-Since false -> 200.
        let h = [("if-match", ETAG), ("if-unmodified-since", BEFORE)];
        assert_eq!(verdict(&h), OK);
        // If-None-Match false + If-Modified-Since true -> 304.
        let h = [("if-none-match", ETAG), ("if-modified-since", BEFORE)];
        assert_eq!(verdict(&h), NM);
        // As MinIO: If-Modified-Since is evaluated even when If-None-Match holds, and the 304
        // conditions come before the 412 ones.
        let h = [("if-none-match", "\"x\""), ("if-modified-since", AFTER)];
        assert_eq!(verdict(&h), NM);
        let h = [("if-match", "\"x\""), ("if-none-match", ETAG)];
        assert_eq!(verdict(&h), NM);
        let h = [("if-match", "\"x\""), ("if-none-match", "\"y\"")];
        assert_eq!(verdict(&h), FAIL_MATCH);
        let h = [
            ("if-unmodified-since", BEFORE),
            ("if-modified-since", BEFORE),
        ];
        assert_eq!(verdict(&h), FAIL_DATE);
    }

    #[test]
    fn stars_lists_and_weak_tags() {
        assert_eq!(verdict(&[("if-match", "*")]), OK);
        assert_eq!(verdict(&[("if-none-match", "*")]), NM);
        // One tag, not a list; a weak tag names no S3 version.
        assert_eq!(verdict(&[("if-match", "\"x\", \"abc\"")]), FAIL_MATCH);
        assert_eq!(verdict(&[("if-none-match", "\"x\", \"abc\"")]), OK);
        assert_eq!(verdict(&[("if-match", "W/\"abc\"")]), FAIL_MATCH);
        assert_eq!(verdict(&[("if-none-match", "W/\"abc\"")]), OK);
        assert_eq!(verdict(&[("if-match", "\"\"")]), FAIL_MATCH);
    }

    #[test]
    fn dates_that_do_not_parse_are_ignored_and_unknown_times_never_decide() {
        assert_eq!(verdict(&[("if-modified-since", "yesterday")]), OK);
        assert_eq!(verdict(&[("if-unmodified-since", "2026-12-01")]), OK);
        // RFC 850 and asctime forms are HTTP dates too.
        let rfc850 = "Tuesday, 01-Dec-26 12:00:00 GMT";
        assert_eq!(verdict(&[("if-modified-since", rfc850)]), NM);
        let mut h = http::HeaderMap::new();
        h.insert("if-modified-since", MODIFIED.parse().unwrap());
        assert_eq!(Conditions::of(&h).evaluate(ETAG, None), OK);
        assert!(Conditions::of(&http::HeaderMap::new()).is_empty());
        assert!(Conditions::of(&h).may_not_modify());
    }
}
