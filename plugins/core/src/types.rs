//! Validated newtypes. Parsing is the only way in, so holders never re-check.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Bucket names are 3 to 63 characters.
    #[error("bucket name {0:?} must be 3 to 63 characters long")]
    BucketLength(String),
    /// Only lowercase letters, digits, '.', '-'; starting and ending alphanumeric.
    #[error("bucket name {0:?} may hold only a-z, 0-9, '.', '-' and must start and end with a letter or digit")]
    BucketChars(String),
    /// No `..`, `.-` or `-.`, and not an IPv4 address: each label a DNS label.
    #[error(
        "bucket name {0:?} must not hold \"..\", \".-\" or \"-.\" nor look like an IP address"
    )]
    BucketLabels(String),
    /// Prefixes and suffixes S3 keeps for its own names (`xn--`, `-s3alias`, ...).
    #[error("bucket name {0:?} uses a prefix or suffix S3 reserves")]
    BucketReserved(String),
    /// Object keys are 1 to 1024 bytes of UTF-8.
    #[error("object key must be 1 to 1024 bytes long")]
    KeyLength,
    /// ETags are quoted or bare printable ASCII.
    #[error("ETag {0:?} is not printable ASCII")]
    ETag(String),
}

/// Prefixes S3 refuses in a general purpose bucket's name.
const RESERVED_PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];
/// Suffixes S3 refuses (access point aliases, directory and table buckets, MRAPs).
const RESERVED_SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];

/// An S3 bucket name, as S3's naming rules allow it. Shared text: clones are reference counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketName(Arc<str>);

impl BucketName {
    /// Parses a bucket name by S3's rules for general purpose buckets: 3-63 characters of
    /// a-z, 0-9, '.', '-', starting and ending with a letter or digit, no `..`, `.-`, `-.`,
    /// not an IPv4 address, none of S3's reserved prefixes and suffixes.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        Self::check(s)?;
        Ok(Self(Arc::from(s)))
    }

    /// [`BucketName::parse`]'s rules without keeping the name (no allocation: for a check on
    /// every request).
    pub fn check(s: &str) -> Result<(), NameError> {
        if !(3..=63).contains(&s.len()) {
            return Err(NameError::BucketLength(s.to_owned()));
        }
        let ok_char =
            |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-';
        let b = s.as_bytes();
        let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        if !b.iter().all(|&c| ok_char(c)) || !edge(b[0]) || !edge(b[b.len() - 1]) {
            return Err(NameError::BucketChars(s.to_owned()));
        }
        let bad_pair = ["..", ".-", "-."].iter().any(|pair| s.contains(pair));
        if bad_pair || s.parse::<std::net::Ipv4Addr>().is_ok() {
            return Err(NameError::BucketLabels(s.to_owned()));
        }
        let reserved = RESERVED_PREFIXES.iter().any(|p| s.starts_with(p))
            || RESERVED_SUFFIXES.iter().any(|x| s.ends_with(x));
        if reserved {
            return Err(NameError::BucketReserved(s.to_owned()));
        }
        Ok(())
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as shared text.
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
    }
}

impl fmt::Display for BucketName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object key: 1 to 1024 bytes of UTF-8 (already percent-decoded). Shared text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    /// Parses a decoded key.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() || s.len() > 1024 {
            return Err(NameError::KeyLength);
        }
        Ok(Self(Arc::from(s)))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as shared text.
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
    }

    /// Whether every origin names this key alike: no empty, `.` or `..` segment (so no
    /// leading `/` and no `//`). S3 keeps such keys as written; MinIO and other
    /// filesystem-backed stores fold them (`a//b` is `a/b`). A cache cannot know which it
    /// fronts, so it caches canonical keys only.
    pub fn is_canonical(&self) -> bool {
        let body = self.0.strip_suffix('/').unwrap_or(&self.0);
        !body.is_empty() && body.split('/').all(|s| !matches!(s, "" | "." | ".."))
    }

    /// The name a folding origin gives this key (empty and `.` segments dropped, `..` taking
    /// the segment before it, a trailing `/` kept), when it differs from the key and is a key:
    /// a write of this key may change that object there.
    pub fn folded(&self) -> Option<ObjectKey> {
        if self.is_canonical() {
            return None;
        }
        let mut parts: Vec<&str> = Vec::new();
        for seg in self.0.split('/') {
            match seg {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                s => parts.push(s),
            }
        }
        let mut out = parts.join("/");
        if self.0.ends_with('/') && !out.is_empty() {
            out.push('/');
        }
        Self::parse(&out).ok().filter(|k| k.0 != self.0)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An entity tag as the origin returned it, quotes included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(String);

impl ETag {
    /// Parses an ETag header value; it must be visible ASCII.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() || !s.bytes().all(|c| (0x21..0x7f).contains(&c)) {
            return Err(NameError::ETag(s.to_owned()));
        }
        Ok(Self(s.to_owned()))
    }

    /// The ETag as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The id of one request: 16 uppercase hex digits, as S3's x-amz-request-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(u64);

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl RequestId {
    /// A new id: a per-process random base plus a counter, so ids are unique and cheap.
    pub fn next() -> Self {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            // First call seeds the base; races here only cost uniqueness of a couple of ids
            // in the very first microsecond, which a random seed makes moot.
            let seed = rand::random::<u64>() & 0xffff_ffff_0000_0000;
            NEXT_ID.store(seed | 1, Ordering::Relaxed);
            return Self(seed);
        }
        Self(n)
    }

    /// The id as a number (trace and span ids are derived from it).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016X}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_rules() {
        assert!(BucketName::parse("warehouse").is_ok());
        assert!(BucketName::parse("a.b-c1").is_ok());
        assert!(BucketName::parse("ab").is_err());
        assert!(BucketName::parse("Upper").is_err());
        assert!(BucketName::parse("-lead").is_err());
        assert!(BucketName::parse("trail.").is_err());
        assert!(BucketName::parse(&"a".repeat(64)).is_err());
        assert!(BucketName::parse(&"a".repeat(63)).is_ok());
        for bad in [
            "foo..bar",
            "foo.-bar",
            "foo-.bar",
            "foo_bar",
            "foo-",
            "_foo",
            "192.168.5.123",
        ] {
            assert!(BucketName::parse(bad).is_err(), "{bad}");
        }
        for reserved in [
            "xn--abc",
            "sthree-x",
            "amzn-s3-demo-x",
            "a-s3alias",
            "a--x-s3",
            "b.mrap",
        ] {
            assert_eq!(
                BucketName::parse(reserved),
                Err(NameError::BucketReserved(reserved.to_owned()))
            );
        }
        // Looks numeric but is not an address: S3 allows it.
        assert!(BucketName::parse("192.168.5.123.4").is_ok());
        assert!(BucketName::parse("1.2.3").is_ok());
    }

    #[test]
    fn key_and_etag_rules() {
        assert!(ObjectKey::parse("").is_err());
        assert!(ObjectKey::parse(&"k".repeat(1025)).is_err());
        assert_eq!(ObjectKey::parse("a/b c").unwrap().as_str(), "a/b c");
        assert!(ETag::parse("\"abc\"").is_ok());
        assert!(ETag::parse("a b").is_err());
    }

    #[test]
    fn keys_a_folding_origin_renames_are_not_canonical() {
        let key = |s: &str| ObjectKey::parse(s).unwrap();
        for ok in ["a/v.parquet", "a/dir/", "x", "a.b/c..d/.e"] {
            assert!(key(ok).is_canonical(), "{ok}");
            assert_eq!(key(ok).folded(), None, "{ok}");
        }
        let folds = [
            ("/a/v.parquet", Some("a/v.parquet")),
            ("a//v.parquet", Some("a/v.parquet")),
            ("a/./v.parquet", Some("a/v.parquet")),
            ("a/b/../v.parquet", Some("a/v.parquet")),
            ("a//dir//", Some("a/dir/")),
            ("/", None),
            ("..", None),
        ];
        for (raw, folded) in folds {
            assert!(!key(raw).is_canonical(), "{raw}");
            assert_eq!(
                key(raw).folded().as_ref().map(ObjectKey::as_str),
                folded,
                "{raw}"
            );
        }
    }

    #[test]
    fn request_ids_are_distinct() {
        let a = RequestId::next();
        let b = RequestId::next();
        assert_ne!(a, b);
        assert_eq!(a.to_string().len(), 16);
    }
}
