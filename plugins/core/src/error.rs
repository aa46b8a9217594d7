//! S3 errors: each code carries its HTTP status and renders S3's XML error body.

use std::fmt::Write;

/// The S3 error codes Floe answers with. Each maps to the status S3 uses for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum S3ErrorCode {
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    BadDigest,
    EntityTooLarge,
    EntityTooSmall,
    IncompleteBody,
    InternalError,
    InvalidAccessKeyId,
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidPart,
    InvalidPartOrder,
    InvalidRange,
    InvalidRequest,
    InvalidURI,
    InvalidPolicyDocument,
    MalformedPOSTRequest,
    MalformedXML,
    MaxPostPreDataLengthExceededError,
    MethodNotAllowed,
    MissingContentLength,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    NotImplemented,
    PreconditionFailed,
    RequestTimeTooSkewed,
    ServiceUnavailable,
    SignatureDoesNotMatch,
    SlowDown,
    XAmzContentSHA256Mismatch,
}

impl S3ErrorCode {
    /// The HTTP status S3 answers this code with.
    pub fn status(self) -> u16 {
        use S3ErrorCode::*;
        match self {
            AccessDenied | InvalidAccessKeyId | RequestTimeTooSkewed | SignatureDoesNotMatch => 403,
            AuthorizationHeaderMalformed
            | AuthorizationQueryParametersError
            | BadDigest
            | EntityTooLarge
            | EntityTooSmall
            | IncompleteBody
            | InvalidArgument
            | InvalidBucketName
            | InvalidDigest
            | InvalidPart
            | InvalidPartOrder
            | InvalidRequest
            | InvalidURI
            | InvalidPolicyDocument
            | MalformedPOSTRequest
            | MalformedXML
            | MaxPostPreDataLengthExceededError
            | XAmzContentSHA256Mismatch => 400,
            InvalidRange => 416,
            MethodNotAllowed => 405,
            MissingContentLength => 411,
            NoSuchBucket | NoSuchKey | NoSuchUpload => 404,
            NotImplemented => 501,
            PreconditionFailed => 412,
            InternalError => 500,
            ServiceUnavailable | SlowDown => 503,
        }
    }

    /// The code as S3 spells it.
    pub fn as_str(self) -> &'static str {
        use S3ErrorCode::*;
        match self {
            AccessDenied => "AccessDenied",
            AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            AuthorizationQueryParametersError => "AuthorizationQueryParametersError",
            BadDigest => "BadDigest",
            EntityTooLarge => "EntityTooLarge",
            EntityTooSmall => "EntityTooSmall",
            InvalidPolicyDocument => "InvalidPolicyDocument",
            MalformedPOSTRequest => "MalformedPOSTRequest",
            MaxPostPreDataLengthExceededError => "MaxPostPreDataLengthExceededError",
            IncompleteBody => "IncompleteBody",
            InternalError => "InternalError",
            InvalidAccessKeyId => "InvalidAccessKeyId",
            InvalidArgument => "InvalidArgument",
            InvalidBucketName => "InvalidBucketName",
            InvalidDigest => "InvalidDigest",
            InvalidPart => "InvalidPart",
            InvalidPartOrder => "InvalidPartOrder",
            MalformedXML => "MalformedXML",
            NoSuchUpload => "NoSuchUpload",
            InvalidRange => "InvalidRange",
            InvalidRequest => "InvalidRequest",
            InvalidURI => "InvalidURI",
            MethodNotAllowed => "MethodNotAllowed",
            MissingContentLength => "MissingContentLength",
            NoSuchBucket => "NoSuchBucket",
            NoSuchKey => "NoSuchKey",
            NotImplemented => "NotImplemented",
            PreconditionFailed => "PreconditionFailed",
            RequestTimeTooSkewed => "RequestTimeTooSkewed",
            ServiceUnavailable => "ServiceUnavailable",
            SignatureDoesNotMatch => "SignatureDoesNotMatch",
            SlowDown => "SlowDown",
            XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
        }
    }
}

/// The cause behind an [`S3Error`], kept for logs (never shown to the client).
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// An error answered to the client as S3 would: status, code, message, and any headers S3
/// sends with it (a 416 carries `Content-Range: bytes */SIZE`). The cause, when there is one,
/// stays in the source chain for logs; the client sees only the code and message.
#[derive(Debug, Clone)]
pub struct S3Error {
    /// The S3 error code.
    pub code: S3ErrorCode,
    /// A human-readable message.
    pub message: String,
    /// Headers sent with the error response.
    pub headers: Vec<(&'static str, String)>,
    cause: Option<Cause>,
}

impl PartialEq for S3Error {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message && self.headers == other.headers
    }
}

impl Eq for S3Error {}

impl std::fmt::Display for S3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for S3Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// The cause of an [`S3Error::internal`], as its text.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Internal(String);

impl S3Error {
    /// An error with a code and message.
    pub fn new(code: S3ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            headers: Vec::new(),
            cause: None,
        }
    }

    /// S3's 500 with its generic message, caused by `cause` (logged, never shown to the
    /// client: S3 does not tell a client what failed inside it).
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::new(
            S3ErrorCode::InternalError,
            "We encountered an internal error. Please try again.",
        )
        .caused_by(Internal(cause.to_string()))
    }

    /// S3's 416 for an object of `size` bytes, with the `Content-Range: bytes */SIZE` it sends.
    pub fn invalid_range(size: u64) -> Self {
        Self::new(
            S3ErrorCode::InvalidRange,
            "The requested range is not satisfiable",
        )
        .with_header("content-range", format!("bytes */{size}"))
    }

    /// S3's 412 for a read whose `If-Match` or `If-Unmodified-Since` does not hold.
    pub fn precondition_failed() -> Self {
        Self::new(
            S3ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        )
    }

    /// This error, sent with one more header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// This error, caused by `cause` (kept for logs, not shown to the client).
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(std::sync::Arc::new(cause));
        self
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// S3's XML error document for this error.
    pub fn to_xml(&self, resource: &str, request_id: &str) -> String {
        let mut out = String::with_capacity(256);
        out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>");
        out.push_str(self.code.as_str());
        out.push_str("</Code><Message>");
        escape_into(&mut out, &self.message);
        out.push_str("</Message><Resource>");
        escape_into(&mut out, resource);
        let _ = write!(
            out,
            "</Resource><RequestId>{request_id}</RequestId></Error>"
        );
        out
    }
}

/// An error with its causes, outermost first ("error sending request: ...: invalid peer
/// certificate: UnknownIssuer"), for logs and operator-facing status: why, not only what.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// `s` escaped for an XML element body or attribute.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s);
    out
}

/// The text of an XML element body with its predefined entities (and `&#34;`, `&#39;`, as
/// some servers write quotes) resolved: the inverse of [`xml_escape`] for what S3 answers.
pub fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Escapes text for an XML element body.
pub(crate) fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_and_maps_status() {
        let e = S3Error::new(S3ErrorCode::SignatureDoesNotMatch, "a<b & c");
        assert_eq!(e.status(), 403);
        let x = e.to_xml("/b/k", "ABC");
        assert!(x.contains("<Message>a&lt;b &amp; c</Message>"));
        assert!(x.contains("<RequestId>ABC</RequestId>"));
        assert_eq!(S3ErrorCode::InvalidRange.status(), 416);
        assert_eq!(S3ErrorCode::SlowDown.status(), 503);
    }

    #[test]
    fn keeps_its_cause_and_headers_but_shows_neither_in_the_body() {
        use std::error::Error;
        let io = std::io::Error::other("socket reset by peer 10.0.0.7");
        let e = S3Error::new(
            S3ErrorCode::InternalError,
            "We encountered an internal error.",
        )
        .caused_by(io);
        assert_eq!(
            e.source().map(|c| c.to_string()).as_deref(),
            Some("socket reset by peer 10.0.0.7")
        );
        assert!(!e.to_xml("/b/k", "1").contains("10.0.0.7"));
        let r = S3Error::invalid_range(1234);
        assert_eq!((r.status(), r.headers[0].1.as_str()), (416, "bytes */1234"));
    }
}
