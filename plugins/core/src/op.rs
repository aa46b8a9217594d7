//! Which S3 operation a request is, from its method, path shape and query. Used for metrics
//! labels, for deciding retry safety, and for refusing what Floe does not carry.

use crate::subresource::ConfigOp;

/// An S3 operation Floe knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum S3Op {
    ListBuckets,
    HeadBucket,
    GetBucketLocation,
    ListObjects,
    ListObjectsV2,
    ListObjectVersions,
    ListMultipartUploads,
    DeleteObjects,
    GetObject,
    HeadObject,
    GetObjectAttributes,
    PutObject,
    /// A browser form upload (`POST /bucket`, multipart/form-data): the key and the
    /// credentials are form fields, signed by a policy.
    PostObject,
    CopyObject,
    DeleteObject,
    CreateMultipartUpload,
    UploadPart,
    UploadPartCopy,
    CompleteMultipartUpload,
    AbortMultipartUpload,
    ListParts,
    CreateBucket,
    DeleteBucket,
    GetBucketVersioning,
    PutBucketVersioning,
    /// An object's or a bucket's configuration (`?tagging`, `?lifecycle`, ...): carried to
    /// the origin as it is ([`crate::subresource`]).
    Config(ConfigOp),
    /// Anything else: refused with 501 NotImplemented.
    Unsupported,
}

impl S3Op {
    /// Every operation Floe carries (not [`S3Op::Unsupported`]), for config validation.
    pub const ALL: [S3Op; 25] = [
        S3Op::ListBuckets,
        S3Op::HeadBucket,
        S3Op::GetBucketLocation,
        S3Op::ListObjects,
        S3Op::ListObjectsV2,
        S3Op::ListObjectVersions,
        S3Op::ListMultipartUploads,
        S3Op::DeleteObjects,
        S3Op::GetObject,
        S3Op::HeadObject,
        S3Op::GetObjectAttributes,
        S3Op::PutObject,
        S3Op::PostObject,
        S3Op::CopyObject,
        S3Op::DeleteObject,
        S3Op::CreateMultipartUpload,
        S3Op::UploadPart,
        S3Op::UploadPartCopy,
        S3Op::CompleteMultipartUpload,
        S3Op::AbortMultipartUpload,
        S3Op::ListParts,
        S3Op::CreateBucket,
        S3Op::DeleteBucket,
        S3Op::GetBucketVersioning,
        S3Op::PutBucketVersioning,
    ];

    /// What an anonymous (unsigned) request may do on a route that does not list operations:
    /// read objects and list them, never write, delete or start uploads.
    pub const ANONYMOUS_READ: [S3Op; 4] = [
        S3Op::GetObject,
        S3Op::HeadObject,
        S3Op::ListObjects,
        S3Op::ListObjectsV2,
    ];

    /// The operation named `name` as S3 spells it (`GetObject`, `PutObjectTagging`), if Floe
    /// carries it.
    pub fn from_name(name: &str) -> Option<S3Op> {
        let config = ConfigOp::all().map(S3Op::Config);
        Self::ALL
            .into_iter()
            .chain(config)
            .find(|op| op.as_str() == name)
    }

    /// Classifies a request. `query` is the raw query string; `has_key` says whether the
    /// path names an object; `copy_source` whether x-amz-copy-source is present.
    pub fn classify(
        method: &str,
        has_bucket: bool,
        has_key: bool,
        query: &str,
        copy_source: bool,
    ) -> S3Op {
        let q = |name: &str| {
            query
                .split('&')
                .any(|kv| kv.split('=').next() == Some(name))
        };
        use S3Op::*;
        if !has_bucket {
            return if method == "GET" {
                ListBuckets
            } else {
                Unsupported
            };
        }
        let config = |on_object| ConfigOp::classify(on_object, method, query);
        if !has_key {
            if let Some(op) = config(false) {
                return op.map_or(Unsupported, Config);
            }
            return match method {
                "HEAD" => HeadBucket,
                "GET" if q("location") => GetBucketLocation,
                "GET" if q("versioning") => GetBucketVersioning,
                "PUT" if q("versioning") => PutBucketVersioning,
                "PUT" if query.is_empty() => CreateBucket,
                "DELETE" if query.is_empty() => DeleteBucket,
                "GET" if q("versions") => ListObjectVersions,
                "GET" if q("uploads") => ListMultipartUploads,
                "GET" if q("list-type") => ListObjectsV2,
                "GET" => ListObjects,
                "POST" if q("delete") => DeleteObjects,
                "POST" if query.is_empty() => PostObject,
                _ => Unsupported,
            };
        }
        if !q("uploadId") {
            if let Some(op) = config(true) {
                return op.map_or(Unsupported, Config);
            }
        }
        match method {
            "GET" if q("uploadId") => ListParts,
            "GET" if q("attributes") => GetObjectAttributes,
            "GET" => GetObject,
            "HEAD" => HeadObject,
            "PUT" if q("partNumber") && q("uploadId") && copy_source => UploadPartCopy,
            "PUT" if q("partNumber") && q("uploadId") => UploadPart,
            "PUT" if copy_source => CopyObject,
            "PUT" => PutObject,
            "POST" if q("uploads") => CreateMultipartUpload,
            "POST" if q("uploadId") => CompleteMultipartUpload,
            "DELETE" if q("uploadId") => AbortMultipartUpload,
            "DELETE" => DeleteObject,
            _ => Unsupported,
        }
    }

    /// Whether replaying the request cannot change the outcome (safe to retry).
    pub fn is_idempotent(self) -> bool {
        use S3Op::*;
        if let Config(c) = self {
            return c.is_get();
        }
        matches!(
            self,
            ListBuckets
                | HeadBucket
                | GetBucketLocation
                | ListObjects
                | ListObjectsV2
                | ListObjectVersions
                | ListMultipartUploads
                | GetObject
                | HeadObject
                | GetObjectAttributes
                | ListParts
                | DeleteObject
                | AbortMultipartUpload
                | GetBucketVersioning
        )
    }

    /// Whether it manages a bucket itself (creates, deletes or configures it): carried only
    /// on routes with `bucket_operations: true`.
    pub fn is_bucket_admin(self) -> bool {
        use S3Op::*;
        if let Config(c) = self {
            return !c.on_object();
        }
        matches!(
            self,
            CreateBucket | DeleteBucket | GetBucketVersioning | PutBucketVersioning
        )
    }

    /// The operation's name, for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        use S3Op::*;
        match self {
            ListBuckets => "ListBuckets",
            HeadBucket => "HeadBucket",
            GetBucketLocation => "GetBucketLocation",
            ListObjects => "ListObjects",
            ListObjectsV2 => "ListObjectsV2",
            ListObjectVersions => "ListObjectVersions",
            ListMultipartUploads => "ListMultipartUploads",
            DeleteObjects => "DeleteObjects",
            GetObject => "GetObject",
            HeadObject => "HeadObject",
            GetObjectAttributes => "GetObjectAttributes",
            PutObject => "PutObject",
            PostObject => "PostObject",
            CopyObject => "CopyObject",
            DeleteObject => "DeleteObject",
            CreateMultipartUpload => "CreateMultipartUpload",
            UploadPart => "UploadPart",
            UploadPartCopy => "UploadPartCopy",
            CompleteMultipartUpload => "CompleteMultipartUpload",
            AbortMultipartUpload => "AbortMultipartUpload",
            ListParts => "ListParts",
            CreateBucket => "CreateBucket",
            DeleteBucket => "DeleteBucket",
            GetBucketVersioning => "GetBucketVersioning",
            PutBucketVersioning => "PutBucketVersioning",
            Config(c) => c.name(),
            Unsupported => "Unsupported",
        }
    }
}

/// Query parameters that make a read ask for something other than the current version's
/// bytes as stored (an old version, a part): a cache passes it on. (Response header overrides
/// do not: see [`response_overrides`].)
const OTHER_QUERY: &[&str] = &["versionId", "partNumber"];

/// The `response-*` query parameters of a GetObject and the response header each replaces.
const OVERRIDES: [(&str, http::HeaderName); 6] = [
    ("response-content-type", http::header::CONTENT_TYPE),
    (
        "response-content-disposition",
        http::header::CONTENT_DISPOSITION,
    ),
    ("response-cache-control", http::header::CACHE_CONTROL),
    ("response-content-encoding", http::header::CONTENT_ENCODING),
    ("response-content-language", http::header::CONTENT_LANGUAGE),
    ("response-expires", http::header::EXPIRES),
];

/// The response headers a read's `response-*` query parameters set (a presigned browser
/// download's Content-Disposition, say), percent-decoded; empty, with no allocation, when
/// there are none. A value that is not a valid header value is left out.
pub fn response_overrides(query: &str) -> Vec<(http::HeaderName, http::HeaderValue)> {
    if !query.contains("response-") {
        return Vec::new();
    }
    query
        .split('&')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (_, header) = OVERRIDES.iter().find(|(q, _)| *q == name)?;
            let text = percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .ok()?;
            Some((header.clone(), http::HeaderValue::from_str(&text).ok()?))
        })
        .collect()
}

/// Headers that make a read key-dependent (SSE-C), or that S3 refuses on a read (the SSE-S3
/// and SSE-KMS request headers: 400 from the origin, never a cached 200): a cache passes it
/// on. (Conditional headers do not: a cache evaluates them against the version it holds, see
/// [`crate::conditions`].)
const OTHER_HEADERS: &[&str] = &[
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-context",
];

/// Whether a GET or HEAD with `query` and `headers` reads the current version's bytes as
/// stored (whole, or one range), conditionally or not: what a cache stage serves. A read that
/// is not (see `OTHER_QUERY`, `OTHER_HEADERS`, or several ranges) goes to the origin.
pub fn plain_read(query: &str, headers: &http::HeaderMap) -> bool {
    plain_but(query, headers, "")
}

/// The version id a GET or HEAD reads (`versionId=V`, percent-decoded) when it is otherwise a
/// plain read (see [`plain_read`]): an immutable version a cache may serve. `None` for a read
/// of the current version, of `null` (the version a PUT to an unversioned or suspended bucket
/// overwrites) or of a part.
pub fn version_read(query: &str, headers: &http::HeaderMap) -> Option<String> {
    let raw = query
        .split('&')
        .find_map(|p| p.strip_prefix("versionId="))?;
    let version = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()?;
    let plain = plain_but(query, headers, "versionId");
    (plain && !version.is_empty() && version != "null").then(|| version.into_owned())
}

/// [`plain_read`], not counting the query parameter `allowed`.
fn plain_but(query: &str, headers: &http::HeaderMap, allowed: &str) -> bool {
    let other_query = query.split('&').any(|p| {
        let name = p.split('=').next().unwrap_or("");
        name != allowed && OTHER_QUERY.contains(&name)
    });
    let several_ranges = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|r| r.contains(','));
    !other_query && !several_ranges && !OTHER_HEADERS.iter().any(|h| headers.contains_key(*h))
}

#[cfg(test)]
mod tests {
    use super::S3Op::{self, *};
    use super::{plain_read, response_overrides, version_read};

    #[test]
    fn classifies() {
        let c = S3Op::classify;
        assert_eq!(c("GET", false, false, "", false), ListBuckets);
        assert_eq!(
            c("GET", true, false, "list-type=2&prefix=a", false),
            ListObjectsV2
        );
        assert_eq!(c("GET", true, false, "prefix=a", false), ListObjects);
        assert_eq!(c("GET", true, false, "location", false), GetBucketLocation);
        assert_eq!(c("GET", true, false, "versions", false), ListObjectVersions);
        assert_eq!(
            c("GET", true, false, "policy", false).as_str(),
            "GetBucketPolicy"
        );
        assert!(c("GET", true, false, "policy", false).is_bucket_admin());
        assert_eq!(c("GET", true, false, "analytics", false), Unsupported);
        assert_eq!(c("PUT", true, false, "", false), CreateBucket);
        assert_eq!(c("DELETE", true, false, "", false), DeleteBucket);
        assert_eq!(
            c("GET", true, false, "versioning", false),
            GetBucketVersioning
        );
        assert_eq!(
            c("PUT", true, false, "versioning", false),
            PutBucketVersioning
        );
        assert_eq!(
            c("PUT", true, false, "tagging", false).as_str(),
            "PutBucketTagging"
        );
        assert_eq!(c("POST", true, false, "tagging", false), Unsupported);
        assert!(CreateBucket.is_bucket_admin() && !HeadBucket.is_bucket_admin());
        assert_eq!(c("POST", true, false, "delete", false), DeleteObjects);
        assert_eq!(c("GET", true, true, "partNumber=1", false), GetObject);
        assert_eq!(c("GET", true, true, "uploadId=x", false), ListParts);
        assert_eq!(
            c("PUT", true, true, "partNumber=1&uploadId=x", true),
            UploadPartCopy
        );
        assert_eq!(
            c("PUT", true, true, "partNumber=1&uploadId=x", false),
            UploadPart
        );
        assert_eq!(c("PUT", true, true, "", true), CopyObject);
        assert_eq!(
            c("POST", true, true, "uploads", false),
            CreateMultipartUpload
        );
        assert_eq!(
            c("POST", true, true, "uploadId=x", false),
            CompleteMultipartUpload
        );
        assert_eq!(
            c("DELETE", true, true, "uploadId=x", false),
            AbortMultipartUpload
        );
        assert_eq!(
            c("GET", true, true, "attributes", false),
            GetObjectAttributes
        );
        let tagging = c("PUT", true, true, "tagging&versionId=v", false);
        assert_eq!(tagging.as_str(), "PutObjectTagging");
        assert!(!tagging.is_bucket_admin() && !tagging.is_idempotent());
        assert!(c("GET", true, true, "retention", false).is_idempotent());
        assert_eq!(
            c("DELETE", true, true, "uploadId=x&tagging", false),
            AbortMultipartUpload
        );
        assert!(GetObject.is_idempotent() && !PutObject.is_idempotent());
    }

    #[test]
    fn names_round_trip() {
        for op in S3Op::ALL {
            assert_eq!(S3Op::from_name(op.as_str()), Some(op));
        }
        let legal_hold = S3Op::from_name("PutObjectLegalHold");
        assert_eq!(legal_hold.map(S3Op::as_str), Some("PutObjectLegalHold"));
        assert_eq!(S3Op::from_name("Unsupported"), None);
        assert_eq!(S3Op::from_name("getobject"), None);
    }

    #[test]
    fn a_version_read_names_a_version_and_is_otherwise_plain() {
        let none = http::HeaderMap::new();
        assert_eq!(
            version_read("versionId=a%2Bb&x-id=GetObject", &none).as_deref(),
            Some("a+b")
        );
        assert_eq!(version_read("x-id=GetObject", &none), None);
        assert_eq!(version_read("versionId=null", &none), None);
        assert_eq!(version_read("versionId=", &none), None);
        assert_eq!(version_read("versionId=v1&partNumber=2", &none), None);
        let mut ranges = http::HeaderMap::new();
        ranges.insert("range", "bytes=0-1,4-5".parse().unwrap());
        assert_eq!(version_read("versionId=v1", &ranges), None);
    }

    #[test]
    fn response_overrides_are_decoded_header_values() {
        assert!(response_overrides("x-id=GetObject").is_empty());
        let o = response_overrides(
            "response-content-disposition=attachment%3B%20filename%3D%22a.csv%22&x-id=GetObject&response-content-type=text%2Fcsv&response-bogus=1",
        );
        let text: Vec<(&str, &str)> = o
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            text,
            [
                ("content-disposition", "attachment; filename=\"a.csv\""),
                ("content-type", "text/csv")
            ]
        );
        assert!(response_overrides("response-content-type=a%0Ab").is_empty());
    }

    #[test]
    fn a_plain_read_is_the_current_version_whole_or_one_range() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = http::HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, http::HeaderValue::from_static(v));
            }
            m
        };
        assert!(plain_read("", &h(&[])));
        assert!(plain_read("x-id=GetObject", &h(&[("range", "bytes=0-9")])));
        assert!(!plain_read("versionId=3", &h(&[])));
        assert!(!plain_read("partNumber=1&x-id=GetObject", &h(&[])));
        assert!(plain_read("response-content-type=text%2Fcsv", &h(&[])));
        assert!(plain_read("", &h(&[("if-none-match", "\"e\"")])));
        assert!(plain_read(
            "",
            &h(&[("if-match", "\"e\""), ("range", "bytes=0-9")])
        ));
        assert!(!plain_read("", &h(&[("range", "bytes=0-1,5-6")])));
        // S3 refuses SSE request headers on a read (400): the origin must say so.
        assert!(!plain_read(
            "",
            &h(&[("x-amz-server-side-encryption", "aws:kms")])
        ));
    }
}
