//! Request verification: recomputes the signature over exactly what the client signed.

use std::collections::HashMap;

use floe_core::{S3Error, S3ErrorCode};

use crate::auth::{self, AuthParams, AuthSource};
use crate::canonical;

/// Largest clock difference S3 accepts between a request's date and the server's clock.
pub const MAX_SKEW_SECONDS: i64 = 15 * 60;

/// The result of a successful verification.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The parsed authorisation.
    pub params: AuthParams,
    /// The derived signing key (used again for chunk signatures).
    pub signing_key: [u8; 32],
    /// The payload hash the client declared (x-amz-content-sha256).
    pub payload_hash: String,
}

/// Verifies SigV4 requests against a fixed set of client keys and one region.
#[derive(Debug, Clone)]
pub struct Verifier {
    region: String,
    keys: HashMap<String, String>,
}

/// The parts of a request that SigV4 covers.
pub struct RequestParts<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The path as sent (still percent-encoded).
    pub raw_path: &'a str,
    /// The query as sent, without '?'.
    pub raw_query: &'a str,
    /// The request headers.
    pub headers: &'a http::HeaderMap,
}

fn denied(code: S3ErrorCode, msg: &str) -> S3Error {
    S3Error::new(code, msg)
}

impl Verifier {
    /// A verifier for `region` accepting the given (access key, secret) pairs.
    pub fn new(
        region: impl Into<String>,
        keys: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        Self {
            region: region.into(),
            keys: keys.into_iter().collect(),
        }
    }

    /// The secret of `access_key`, if it is one of this verifier's.
    pub(crate) fn secret(&self, access_key: &str) -> Option<&str> {
        self.keys.get(access_key).map(String::as_str)
    }

    /// The region signatures must be scoped to.
    pub(crate) fn region(&self) -> &str {
        &self.region
    }

    /// Verifies a request at unix time `now`. `Ok(None)`: the request carries no SigV4 at all.
    pub fn verify(&self, req: &RequestParts<'_>, now: i64) -> Result<Option<Verified>, S3Error> {
        let header = |n: &str| req.headers.get(n).and_then(|v| v.to_str().ok());
        let params = if let Some(authz) = header("authorization") {
            let date = match header("x-amz-date") {
                Some(d) => Some(d.to_owned()),
                None => header("date").and_then(auth::http_date_to_amz),
            };
            auth::parse_header(authz, date.as_deref())?
        } else if let Some(p) = auth::parse_query(req.raw_query)? {
            p
        } else if req
            .raw_query
            .split('&')
            .any(|p| p.starts_with("AWSAccessKeyId="))
        {
            return Err(denied(S3ErrorCode::InvalidRequest, auth::SIGV2_REFUSED));
        } else {
            return Ok(None);
        };
        let secret = self.keys.get(&params.access_key).ok_or_else(|| {
            denied(
                S3ErrorCode::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            )
        })?;
        if params.region != self.region {
            return Err(S3Error::new(
                S3ErrorCode::AuthorizationHeaderMalformed,
                format!("The authorization header is malformed; the region '{}' is wrong; expecting '{}'", params.region, self.region),
            ));
        }
        self.check_time(&params, now)?;
        let payload_hash = match (header("x-amz-content-sha256"), params.source) {
            (Some(h), _) => h.to_owned(),
            (None, AuthSource::Query { .. }) => "UNSIGNED-PAYLOAD".to_owned(),
            (None, AuthSource::Header) => {
                return Err(denied(
                    S3ErrorCode::InvalidRequest,
                    "Missing required header for this request: x-amz-content-sha256",
                ))
            }
        };
        if !params.signed_headers.split(';').any(|h| h == "host") {
            return Err(denied(
                S3ErrorCode::AccessDenied,
                "the host header must be signed",
            ));
        }
        check_all_signed(req.headers, &params)?;
        let key = auth::signing_key(secret, &params.scope_date, &params.region, &params.service);
        let skip = match params.source {
            AuthSource::Query { .. } => "X-Amz-Signature",
            AuthSource::Header => "",
        };
        let query = canonical::canonical_query(req.raw_query, skip);
        let headers = canonical::canonical_headers(req.headers, &params.signed_headers)
            .ok_or_else(|| {
                denied(
                    S3ErrorCode::SignatureDoesNotMatch,
                    "a header listed in SignedHeaders is missing",
                )
            })?;
        let scope = params.scope();
        let normalized = canonical::canonical_uri(req.raw_path);
        // S3 compares the single-encoded path; a client that left a reserved character raw
        // may also have signed it raw, so the path as sent is the second candidate.
        let candidates: &[&str] = if normalized == req.raw_path {
            &[&normalized]
        } else {
            &[&normalized, req.raw_path]
        };
        for uri in candidates {
            let creq = canonical::canonical_request(
                req.method,
                uri,
                &query,
                &headers,
                &params.signed_headers,
                &payload_hash,
            );
            let expected = auth::sign(&key, &auth::string_to_sign(&params.amz_date, &scope, &creq));
            if auth::same_signature(&expected, &params.signature) {
                return Ok(Some(Verified {
                    params,
                    signing_key: key,
                    payload_hash,
                }));
            }
        }
        Err(denied(
            S3ErrorCode::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        ))
    }

    fn check_time(&self, params: &AuthParams, now: i64) -> Result<(), S3Error> {
        let t = auth::parse_amz_date(&params.amz_date).ok_or_else(|| {
            denied(
                S3ErrorCode::AccessDenied,
                "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"",
            )
        })?;
        if !params.amz_date.starts_with(&params.scope_date) {
            return Err(denied(
                S3ErrorCode::SignatureDoesNotMatch,
                "the credential scope date does not match x-amz-date",
            ));
        }
        match params.source {
            AuthSource::Header if (now - t).abs() > MAX_SKEW_SECONDS => Err(denied(
                S3ErrorCode::RequestTimeTooSkewed,
                "The difference between the request time and the current time is too large.",
            )),
            AuthSource::Query { .. } if t > now + MAX_SKEW_SECONDS => Err(denied(
                S3ErrorCode::AccessDenied,
                "Request is not valid yet",
            )),
            // A URL valid for 0 seconds is expired when it arrives (as S3 answers it).
            AuthSource::Query { expires: 0 } => {
                Err(denied(S3ErrorCode::AccessDenied, "Request has expired"))
            }
            AuthSource::Query { expires } if now > t.saturating_add(expires as i64) => {
                Err(denied(S3ErrorCode::AccessDenied, "Request has expired"))
            }
            _ => Ok(()),
        }
    }
}

/// S3 refuses a request carrying an `x-amz-*` header its signature does not cover: the
/// header would take effect (an added `x-amz-copy-source` turns a PUT into a copy) without the
/// key holder having asked for it. A presigned URL's client may add the payload hash it cannot
/// have signed.
fn check_all_signed(headers: &http::HeaderMap, params: &AuthParams) -> Result<(), S3Error> {
    let signed = |name: &str| params.signed_headers.split(';').any(|h| h == name);
    let presigned = matches!(params.source, AuthSource::Query { .. });
    let unsigned = headers.keys().map(http::HeaderName::as_str).find(|name| {
        name.starts_with("x-amz-")
            && !signed(name)
            && !(presigned && *name == "x-amz-content-sha256")
    });
    match unsigned {
        None => Ok(()),
        Some(name) => Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            format!("There were headers present in the request which were not signed: {name}"),
        )),
    }
}
