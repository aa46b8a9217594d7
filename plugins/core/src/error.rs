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
    IncompleteBody,
    InternalError,
    InvalidAccessKeyId,
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidRange,
    InvalidRequest,
    MethodNotAllowed,
    MissingContentLength,
    NoSuchBucket,
    NotImplemented,
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
            | IncompleteBody
            | InvalidArgument
            | InvalidBucketName
            | InvalidDigest
            | InvalidRequest
            | XAmzContentSHA256Mismatch => 400,
            InvalidRange => 416,
            MethodNotAllowed => 405,
            MissingContentLength => 411,
            NoSuchBucket => 404,
            NotImplemented => 501,
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
            IncompleteBody => "IncompleteBody",
            InternalError => "InternalError",
            InvalidAccessKeyId => "InvalidAccessKeyId",
            InvalidArgument => "InvalidArgument",
            InvalidBucketName => "InvalidBucketName",
            InvalidDigest => "InvalidDigest",
            InvalidRange => "InvalidRange",
            InvalidRequest => "InvalidRequest",
            MethodNotAllowed => "MethodNotAllowed",
            MissingContentLength => "MissingContentLength",
            NoSuchBucket => "NoSuchBucket",
            NotImplemented => "NotImplemented",
            RequestTimeTooSkewed => "RequestTimeTooSkewed",
            ServiceUnavailable => "ServiceUnavailable",
            SignatureDoesNotMatch => "SignatureDoesNotMatch",
            SlowDown => "SlowDown",
            XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
        }
    }
}

/// An error answered to the client as S3 would: status, code, message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct S3Error {
    /// The S3 error code.
    pub code: S3ErrorCode,
    /// A human-readable message.
    pub message: String,
}

impl S3Error {
    /// An error with a code and message.
    pub fn new(code: S3ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
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
}
