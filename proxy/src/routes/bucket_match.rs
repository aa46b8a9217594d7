//! A route's `bucket:`: one bucket name, or a glob over names (`analytics-*`; `*` any run of
//! characters, `?` one). Exact names are looked up before patterns; patterns in the order the
//! routes list them, the first match winning.

use std::fmt;

use floe_core::BucketName;
use globset::{Glob, GlobMatcher};

/// Which buckets a route serves.
#[derive(Debug, Clone)]
pub enum BucketMatch {
    /// Exactly this bucket.
    Name(BucketName),
    /// Every bucket whose name matches.
    Pattern(BucketPattern),
}

/// A compiled bucket-name glob.
#[derive(Debug, Clone)]
pub struct BucketPattern {
    text: String,
    matcher: GlobMatcher,
}

impl BucketMatch {
    /// Parses `text`: a pattern when it holds `*` or `?`, else a bucket name.
    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.contains(['*', '?']) {
            return BucketName::parse(text)
                .map(Self::Name)
                .map_err(|e| e.to_string());
        }
        let allowed = |c: char| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '*' | '?')
        };
        if let Some(c) = text.chars().find(|c| !allowed(*c)) {
            return Err(format!(
                "{c:?} cannot be in a bucket pattern: lowercase letters, digits, '-', '.' and \
                 the wildcards '*' and '?'"
            ));
        }
        if text.len() > 63 {
            return Err("a bucket pattern is at most 63 characters".into());
        }
        let matcher = Glob::new(text)
            .map_err(|e| e.to_string())?
            .compile_matcher();
        Ok(Self::Pattern(BucketPattern {
            text: text.to_owned(),
            matcher,
        }))
    }

    /// Whether the route serves `bucket`.
    pub fn matches(&self, bucket: &str) -> bool {
        match self {
            Self::Name(n) => n.as_str() == bucket,
            Self::Pattern(p) => p.matcher.is_match(bucket),
        }
    }

    /// The bucket, for a route of one name.
    pub fn name(&self) -> Option<&BucketName> {
        match self {
            Self::Name(n) => Some(n),
            Self::Pattern(_) => None,
        }
    }

    /// As written in the config.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Name(n) => n.as_str(),
            Self::Pattern(p) => &p.text,
        }
    }
}

impl fmt::Display for BucketMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_themselves_and_patterns_match_by_glob() {
        let exact = BucketMatch::parse("warehouse").unwrap();
        assert!(exact.matches("warehouse") && !exact.matches("warehouse2"));
        assert_eq!(exact.name().map(|n| n.as_str()), Some("warehouse"));
        let p = BucketMatch::parse("analytics-*").unwrap();
        assert!(p.matches("analytics-prod") && p.matches("analytics-"));
        assert!(!p.matches("analytics") && !p.matches("xanalytics-prod"));
        assert!(p.name().is_none());
        let q = BucketMatch::parse("team-?.data").unwrap();
        assert!(q.matches("team-a.data") && !q.matches("team-ab.data"));
    }

    #[test]
    fn bad_patterns_say_why() {
        assert!(BucketMatch::parse("Analytics-*")
            .unwrap_err()
            .contains("'A'"));
        assert!(BucketMatch::parse("a/*").unwrap_err().contains("'/'"));
        assert!(BucketMatch::parse("[ab]*").unwrap_err().contains("'['"));
        assert!(
            BucketMatch::parse("UPPER").is_err(),
            "names are still validated"
        );
    }
}
