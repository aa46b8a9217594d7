//! The SigV4 request filter: verifies every request before anything reaches the origin and
//! sets up the body checks its payload mode needs.

use async_trait::async_trait;
use bytes::BytesMut;
use floe_core::{S3Error, S3ErrorCode, S3Op};
use floe_filter::{BodyStage, FilterCtx, RequestFilter, UpstreamPayload};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::chunked::{ChunkSigning, ChunkedStage, Sha256Stage};
use crate::verify::{RequestParts, Verified, Verifier};

/// Bodies up to this size are read and verified in full before the origin is contacted
/// (Pingora's retry buffer replays them). Larger bodies are verified as they stream, and a
/// failure aborts the origin request before its last bytes (so the origin stores nothing).
pub const PREREAD_LIMIT: u64 = 64 * 1024;
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Verifies SigV4 on a route.
pub struct SigV4Filter {
    verifier: Verifier,
    anonymous: Vec<S3Op>,
}

impl SigV4Filter {
    /// A filter with `verifier`; unsigned requests may use the `anonymous` operations only
    /// (empty: every request must be signed). Floe signs what it forwards with the origin's
    /// keys, so whatever is listed here is done with the origin's authority.
    pub fn new(verifier: Verifier, anonymous: Vec<S3Op>) -> Self {
        Self {
            verifier,
            anonymous,
        }
    }
}

fn header<'a>(h: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn decoded_len(h: &http::HeaderMap) -> Result<u64, S3Error> {
    header(h, "x-amz-decoded-content-length")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::MissingContentLength,
                "You must provide the x-amz-decoded-content-length header for aws-chunked bodies.",
            )
        })
}

/// Chooses the body stage and upstream payload signing for a verified request.
fn payload_plan(
    v: &Verified,
    h: &http::HeaderMap,
) -> Result<(UpstreamPayload, Option<Box<dyn BodyStage>>), S3Error> {
    let has_body = header(h, "content-length").is_some_and(|l| l != "0")
        || h.contains_key("transfer-encoding");
    Ok(match v.payload_hash.as_str() {
        "UNSIGNED-PAYLOAD" => (UpstreamPayload::Unsigned, None),
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => {
            let stage = ChunkedStage::new(None, header(h, "x-amz-trailer"), decoded_len(h)?)?;
            (UpstreamPayload::UnsignedTrailer, Some(Box::new(stage) as Box<dyn BodyStage>))
        }
        mode @ ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD" | "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER") => {
            let signing = ChunkSigning {
                key: v.signing_key,
                amz_date: v.params.amz_date.clone(),
                scope: v.params.scope(),
                seed: v.params.signature.clone(),
            };
            let trailer = match mode.ends_with("-TRAILER") {
                true => Some(header(h, "x-amz-trailer").ok_or_else(|| {
                    S3Error::new(S3ErrorCode::InvalidRequest, format!("{mode} needs an x-amz-trailer header"))
                })?),
                false => None,
            };
            let length = decoded_len(h)?;
            let stage = ChunkedStage::new(Some(signing), trailer, length)?;
            (UpstreamPayload::Decoded { length }, Some(Box::new(stage) as Box<dyn BodyStage>))
        }
        hash if hash.len() == 64 && hash.bytes().all(|c| c.is_ascii_hexdigit()) => {
            if !has_body {
                if !hash.eq_ignore_ascii_case(EMPTY_SHA256) {
                    return Err(S3Error::new(S3ErrorCode::XAmzContentSHA256Mismatch, "The provided 'x-amz-content-sha256' header does not match what was computed."));
                }
                (UpstreamPayload::Sha256(hash.to_ascii_lowercase()), None)
            } else {
                let stage = Sha256Stage::new(hash);
                (UpstreamPayload::Sha256(hash.to_ascii_lowercase()), Some(Box::new(stage) as Box<dyn BodyStage>))
            }
        }
        other if other.starts_with("STREAMING-") => {
            return Err(S3Error::new(S3ErrorCode::NotImplemented, format!("payload mode {other} is not supported")))
        }
        _ => {
            return Err(S3Error::new(S3ErrorCode::InvalidArgument, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, STREAMING-UNSIGNED-PAYLOAD-TRAILER, or a valid sha256 value."))
        }
    })
}

/// Reads a small body completely and runs a fresh copy of `stage` over it.
async fn preread(session: &mut Session, stage: &dyn BodyStage) -> Result<(), S3Error> {
    let internal = |e: Box<pingora::Error>| {
        S3Error::new(
            S3ErrorCode::IncompleteBody,
            "The request body could not be read to its end.",
        )
        .caused_by(e)
    };
    if header(&session.req_header().headers, "expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        let cont = ResponseHeader::build(100, Some(0)).map_err(internal)?;
        session
            .write_response_header(Box::new(cont), false)
            .await
            .map_err(internal)?;
    }
    session.enable_retry_buffering();
    let mut buf = BytesMut::new();
    while let Some(piece) = session.read_request_body().await.map_err(internal)? {
        buf.extend_from_slice(&piece);
        if buf.len() as u64 > PREREAD_LIMIT {
            return Err(S3Error::new(
                S3ErrorCode::IncompleteBody,
                "body longer than its Content-Length",
            ));
        }
    }
    let mut check = stage.fresh();
    check.feed(&mut Some(buf.freeze()), true)
}

#[async_trait]
impl RequestFilter for SigV4Filter {
    fn name(&self) -> &'static str {
        "sigv4"
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
    ) -> Result<bool, S3Error> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        if ctx.op == S3Op::PostObject {
            // Signed by the form's policy, not by the request's headers.
            crate::post::admit(&self.verifier, &self.anonymous, session, ctx, now).await?;
            return Ok(false);
        }
        let req = session.req_header();
        let parts = RequestParts {
            method: req.method.as_str(),
            raw_path: req.uri.path(),
            raw_query: req.uri.query().unwrap_or(""),
            headers: &req.headers,
        };
        let Some(verified) = self.verifier.verify(&parts, now)? else {
            if self.anonymous.contains(&ctx.op) {
                return Ok(false);
            }
            return Err(S3Error::new(S3ErrorCode::AccessDenied, "Access Denied"));
        };
        let (payload, stage) = payload_plan(&verified, &req.headers)?;
        let small = header(&req.headers, "content-length")
            .and_then(|l| l.parse::<u64>().ok())
            .is_some_and(|l| l <= PREREAD_LIMIT);
        if let Some(stage) = &stage {
            if small {
                preread(session, stage.as_ref()).await?;
                ctx.body_preread = true;
            }
        }
        ctx.access_key = Some(verified.params.access_key);
        ctx.payload = payload;
        ctx.body_stage = stage;
        Ok(false)
    }
}
