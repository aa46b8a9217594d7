//! Parsing of SigV4 credentials (Authorization header or presigned query) and the signature
//! computation itself.

use floe_core::{S3Error, S3ErrorCode};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use time::{macros::format_description, OffsetDateTime, PrimitiveDateTime};

use crate::canonical::{decode, sha256_hex};

type HmacSha256 = Hmac<Sha256>;

/// The SigV4 algorithm name Floe accepts.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// S3's words for a Signature Version 2 request (header or query) where only V4 is taken.
pub const SIGV2_REFUSED: &str =
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.";

/// Where the signature came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthSource {
    /// The Authorization header.
    Header,
    /// Presigned URL query parameters, valid for this many seconds.
    Query {
        /// X-Amz-Expires.
        expires: u64,
    },
}

/// A parsed SigV4 authorisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthParams {
    /// The client access key id.
    pub access_key: String,
    /// Scope date, YYYYMMDD.
    pub scope_date: String,
    /// Scope region.
    pub region: String,
    /// Scope service (must be s3).
    pub service: String,
    /// Signed header names, `;`-separated, lowercase.
    pub signed_headers: String,
    /// The hex signature.
    pub signature: String,
    /// x-amz-date, ISO 8601 basic (YYYYMMDD'T'HHMMSS'Z').
    pub amz_date: String,
    /// Header or query.
    pub source: AuthSource,
}

impl AuthParams {
    /// The credential scope string.
    pub fn scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.scope_date, self.region, self.service
        )
    }
}

fn malformed(msg: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::AuthorizationHeaderMalformed, msg)
}

fn query_error(msg: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::AuthorizationQueryParametersError, msg)
}

/// Splits `AKID/date/region/service/aws4_request`.
pub(crate) fn parse_credential(
    cred: &str,
    err: fn(String) -> S3Error,
) -> Result<[String; 4], S3Error> {
    let parts: Vec<&str> = cred.split('/').collect();
    if parts.len() != 5 || parts[4] != "aws4_request" {
        return Err(err(format!("the Credential {cred:?} is malformed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\"")));
    }
    if parts[3] != "s3" {
        return Err(err(format!(
            "the service {:?} is wrong; expecting \"s3\"",
            parts[3]
        )));
    }
    Ok([parts[0], parts[1], parts[2], parts[3]].map(str::to_owned))
}

/// Parses `AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`.
pub fn parse_header(value: &str, amz_date: Option<&str>) -> Result<AuthParams, S3Error> {
    if value.starts_with("AWS ") {
        // Signature Version 2: deprecated, and refused as S3 refuses it in every region
        // opened since 2014 (Floe cannot tell the origin's region's policy; V4 works in all).
        return Err(S3Error::new(S3ErrorCode::InvalidRequest, SIGV2_REFUSED));
    }
    let rest = value.strip_prefix(ALGORITHM).ok_or_else(|| {
        S3Error::new(
            S3ErrorCode::InvalidArgument,
            "unsupported Authorization type; only AWS4-HMAC-SHA256 is accepted",
        )
    })?;
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            cred = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            sig = Some(v);
        }
    }
    let (Some(cred), Some(signed), Some(sig)) = (cred, signed, sig) else {
        return Err(malformed("the authorization header is malformed; it needs Credential, SignedHeaders and Signature"));
    };
    let [access_key, scope_date, region, service] = parse_credential(cred, malformed)?;
    let amz_date = amz_date
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::AccessDenied,
                "AWS authentication requires a valid Date or x-amz-date header",
            )
        })?
        .to_owned();
    Ok(AuthParams {
        access_key,
        scope_date,
        region,
        service,
        signed_headers: signed.to_owned(),
        signature: sig.to_owned(),
        amz_date,
        source: AuthSource::Header,
    })
}

/// Parses presigned-URL parameters from a raw query string; `None` if it is not presigned.
pub fn parse_query(raw_query: &str) -> Result<Option<AuthParams>, S3Error> {
    let get = |name: &str| {
        raw_query.split('&').find_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k == name).then(|| decode(v))
        })
    };
    let Some(alg) = get("X-Amz-Algorithm") else {
        return Ok(None);
    };
    if alg != ALGORITHM {
        return Err(query_error(format!(
            "X-Amz-Algorithm only supports \"{ALGORITHM}\""
        )));
    }
    let need = |n: &str| {
        get(n).ok_or_else(|| {
            query_error(format!(
                "query-string authentication requires the {n} parameter"
            ))
        })
    };
    let cred = need("X-Amz-Credential")?;
    let [access_key, scope_date, region, service] = parse_credential(&cred, query_error)?;
    let expires: i64 = need("X-Amz-Expires")?
        .parse()
        .map_err(|_| query_error("X-Amz-Expires should be a number"))?;
    // A URL that expired before it was signed: refused as an expired one is (403).
    let expires = u64::try_from(expires).map_err(|_| {
        S3Error::new(
            S3ErrorCode::AccessDenied,
            "X-Amz-Expires must be non-negative",
        )
    })?;
    if expires > 604_800 {
        return Err(query_error(
            "X-Amz-Expires must be less than a week (in seconds) that is 604800",
        ));
    }
    Ok(Some(AuthParams {
        access_key,
        scope_date,
        region,
        service,
        signed_headers: need("X-Amz-SignedHeaders")?,
        signature: need("X-Amz-Signature")?,
        amz_date: need("X-Amz-Date")?,
        source: AuthSource::Query { expires },
    }))
}

/// Parses an ISO 8601 basic timestamp (20130524T000000Z) to unix seconds.
pub fn parse_amz_date(s: &str) -> Option<i64> {
    let fmt = format_description!("[year][month][day]T[hour][minute][second]Z");
    PrimitiveDateTime::parse(s, fmt)
        .ok()
        .map(|t| t.assume_utc().unix_timestamp())
}

/// Converts an RFC 7231 `Date` header to the ISO 8601 basic form SigV4 signs.
pub fn http_date_to_amz(s: &str) -> Option<String> {
    let t = httpdate::parse_http_date(s).ok()?;
    let t = OffsetDateTime::from(t);
    let fmt = format_description!("[year][month][day]T[hour][minute][second]Z");
    t.format(fmt).ok()
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so new_from_slice cannot fail here.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0; 32],
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Derives the signing key for a secret and scope.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, service.as_bytes());
    hmac(&k, b"aws4_request")
}

/// The string to sign for a canonical request.
pub fn string_to_sign(amz_date: &str, scope: &str, canonical_request: &str) -> String {
    format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    )
}

/// Hex HMAC of `data` with a derived signing key.
pub fn sign(key: &[u8; 32], data: &str) -> String {
    hex::encode(hmac(key, data.as_bytes()))
}

/// Constant-time comparison of two hex signatures.
pub fn same_signature(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header() {
        let h = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let p = parse_header(h, Some("20130524T000000Z")).unwrap();
        assert_eq!(p.access_key, "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(p.scope(), "20130524/us-east-1/s3/aws4_request");
        assert_eq!(
            p.signed_headers,
            "host;range;x-amz-content-sha256;x-amz-date"
        );
        assert!(parse_header("AWS4-HMAC-SHA256 Credential=a/b", Some("x")).is_err());
        let v2 = parse_header(
            "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=",
            None,
        );
        assert_eq!(v2.unwrap_err().code, S3ErrorCode::InvalidRequest);
        assert_eq!(
            parse_header("AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=00", Some("x")).unwrap_err().code,
            S3ErrorCode::AuthorizationHeaderMalformed
        );
    }

    #[test]
    fn parses_dates() {
        assert_eq!(parse_amz_date("20130524T000000Z"), Some(1_369_353_600));
        assert_eq!(parse_amz_date("2013-05-24"), None);
        assert_eq!(
            http_date_to_amz("Fri, 24 May 2013 00:00:00 GMT").as_deref(),
            Some("20130524T000000Z")
        );
    }

    #[test]
    fn query_expiry_bounds() {
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=604801&X-Amz-SignedHeaders=host&X-Amz-Signature=00";
        assert_eq!(
            parse_query(q).unwrap_err().code,
            S3ErrorCode::AuthorizationQueryParametersError
        );
        assert!(parse_query("a=b").unwrap().is_none());
    }
}
