//! A request's body and headers as the write-back stage reads them: the body as a
//! [`BodySource`] (through the route's body check, e.g. SigV4's), `Expect: 100-continue`, the
//! declared size, and the headers kept with a staged object.

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{S3Error, S3ErrorCode};
use floe_filter::{BodyStage, FilterCtx};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::stage::BodySource;

/// Headers of a PUT kept with a staged object and replayed on its reads.
const KEPT: &[&str] = &[
    "content-type",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
];

/// The request body through the route's body stage (SigV4 chunk checks, aws-chunked decoding).
pub(crate) struct SessionBody<'a> {
    session: &'a mut Session,
    stage: Option<&'a mut Box<dyn BodyStage>>,
    preread: Option<Bytes>,
    done: bool,
}

impl<'a> SessionBody<'a> {
    /// The body of `session` through `stage`, after the pre-read `preread` if there is one.
    pub(crate) fn new(
        session: &'a mut Session,
        stage: Option<&'a mut Box<dyn BodyStage>>,
        preread: Option<Bytes>,
    ) -> Self {
        Self {
            session,
            stage,
            preread,
            done: false,
        }
    }
}

#[async_trait]
impl BodySource for SessionBody<'_> {
    async fn next(&mut self) -> Result<Option<Bytes>, S3Error> {
        loop {
            if self.done {
                return Ok(None);
            }
            let (mut piece, end) = if let Some(b) = self.preread.take() {
                (Some(b), true)
            } else {
                let p = self.session.read_request_body().await.map_err(|e| {
                    S3Error::new(
                        S3ErrorCode::IncompleteBody,
                        "The request body could not be read to its end.",
                    )
                    .caused_by(e)
                })?;
                let end = p.is_none();
                (p, end)
            };
            if let Some(stage) = self.stage.as_mut() {
                stage.feed(&mut piece, end)?;
            }
            self.done = end;
            match piece {
                Some(b) if !b.is_empty() => return Ok(Some(b)),
                _ => continue,
            }
        }
    }
}

/// The object bytes a PUT or UploadPart carries (x-amz-decoded-content-length under
/// aws-chunked framing, else Content-Length); none when unknown.
pub(crate) fn body_size(session: &Session) -> Option<u64> {
    header(session, "x-amz-decoded-content-length")
        .or_else(|| header(session, "content-length"))
        .and_then(|l| l.parse().ok())
}

/// Answers `Expect: 100-continue` (unless the body was read already) and returns the body
/// the SigV4 stage pre-read, if it did.
pub(crate) async fn continue_body(
    session: &mut Session,
    ctx: &FilterCtx,
) -> Result<Option<Bytes>, S3Error> {
    if ctx.body_preread {
        return Ok(Some(session.get_retry_buffer().unwrap_or_default()));
    }
    if header(session, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        let cont = ResponseHeader::build(100, Some(0)).map_err(S3Error::internal)?;
        session
            .write_response_header(Box::new(cont), false)
            .await
            .map_err(S3Error::internal)?;
    }
    Ok(None)
}

/// Request headers that ask the origin for more than bytes and metadata: tags, object lock,
/// ACL grants, server-side encryption, a storage class, a website redirect. A staged write
/// could not hand them on as the origin would apply them: a write that carries one goes to
/// the origin itself (`direct`).
const ORIGIN_ONLY: &[&str] = &[
    "x-amz-tagging",
    "x-amz-object-lock-",
    "x-amz-acl",
    "x-amz-grant-",
    "x-amz-server-side-encryption",
    "x-amz-storage-class",
    "x-amz-website-redirect-location",
];

/// Whether the request carries a header only the origin can apply ([`ORIGIN_ONLY`]).
pub(crate) fn origin_only(session: &Session) -> bool {
    session
        .req_header()
        .headers
        .keys()
        .any(|k| ORIGIN_ONLY.iter().any(|p| k.as_str().starts_with(p)))
}

/// The request headers kept with a staged object (content-type, ..., x-amz-meta-*).
pub(crate) fn kept_headers(session: &Session) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = KEPT
        .iter()
        .filter_map(|h| header(session, h).map(|v| ((*h).to_owned(), v.to_owned())))
        .collect();
    for (k, v) in &session.req_header().headers {
        if k.as_str().starts_with("x-amz-meta-") {
            if let Ok(v) = v.to_str() {
                headers.push((k.as_str().to_owned(), v.to_owned()));
            }
        }
    }
    headers
}

/// The integrity headers (`Content-MD5`, `x-amz-checksum-*`) the body must match.
pub(crate) fn expected_digests(session: &Session) -> Result<crate::digests::Expected, S3Error> {
    let headers = session.req_header().headers.iter();
    crate::digests::Expected::from_headers(
        headers.filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))),
    )
}

pub(crate) fn header<'a>(session: &'a Session, name: &str) -> Option<&'a str> {
    session
        .req_header()
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
}
