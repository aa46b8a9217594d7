//! POST Object forwarded: the form the SigV4 stage verified ([`PostUpload`]) goes to the
//! origin as a PUT of the file's bytes, streamed as they arrive (the form around them
//! stripped), and the client gets S3's answer to a POST: 204, 200, 201 with a PostResponse,
//! or 303 to its `success_action_redirect`.

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::uri::uri_encode;
use floe_core::{xml_escape, ByteStream, ETag, OriginError, OriginReader, S3Error, S3ErrorCode};
use floe_sigv4::PostUpload;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use tokio::sync::mpsc;

use crate::modes::Ctx;
use crate::origin::reader::PingoraOriginReader;
use crate::routes::Route;

/// Pieces in flight between the client's body and the origin's PUT.
const PIPE: usize = 4;

/// Forwards the verified upload and answers the client; the status written.
pub async fn forward(session: &mut Session, ctx: &mut Ctx, route: &Route) -> Result<u16, S3Error> {
    let upload = ctx.f.ext.remove::<PostUpload>().ok_or_else(|| {
        S3Error::new(
            S3ErrorCode::NotImplemented,
            "POST uploads need the sigv4 stage on the route",
        )
    })?;
    let (Some(bucket), Some(key)) = (ctx.f.bucket.clone(), ctx.f.key.clone()) else {
        return Err(S3Error::new(
            S3ErrorCode::InternalError,
            "POST without bucket or key",
        ));
    };
    let reader = PingoraOriginReader::new(route.origin.clone());
    let (tx, rx) = mpsc::channel(PIPE);
    let body = Box::new(Piped(rx));
    let put = reader.put(&bucket, &key, upload.file_len, &upload.headers, body);
    let (pumped, stored) = tokio::join!(pump(session, &upload, tx), put);
    pumped?;
    let etag = stored.map_err(origin_error)?;
    // The stages see the origin's answer as for any write (the block cache drops the key's
    // answers on every node before the client hears of the change).
    let mut stored_resp = ResponseHeader::build(200, Some(1)).map_err(S3Error::internal)?;
    for filter in &route.filters {
        filter
            .upstream_response_filter(&mut stored_resp, &mut ctx.f)
            .await?;
    }
    let host = session
        .req_header()
        .headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_owned();
    let location = format!("http://{host}/{bucket}/{}", uri_encode(key.as_str(), false));
    answer(
        session,
        ctx,
        &upload,
        &location,
        (bucket.as_str(), key.as_str()),
        &etag,
    )
    .await
}

/// Moves the file's bytes from the client to the PUT: first those read with the form, then
/// the rest of the body, less the closing boundary, which must be exactly what ends it.
async fn pump(
    session: &mut Session,
    upload: &PostUpload,
    tx: mpsc::Sender<Result<Bytes, OriginError>>,
) -> Result<(), S3Error> {
    let malformed = || {
        S3Error::new(
            S3ErrorCode::MalformedPOSTRequest,
            "The body of your POST request is not well-formed multipart/form-data: the file must be the last field.",
        )
    };
    let mut sent = 0u64;
    let mut tail: Vec<u8> = Vec::new();
    let mut next = Some(upload.read_ahead.clone());
    while let Some(mut piece) = next.take() {
        let room = upload.file_len - sent;
        if piece.len() as u64 > room {
            tail.extend_from_slice(&piece.split_off(room as usize));
        }
        sent += piece.len() as u64;
        if !piece.is_empty() && tx.send(Ok(piece)).await.is_err() {
            return Ok(()); // the PUT ended first: its outcome is the answer
        }
        if tail.len() > upload.trailer.len() {
            break;
        }
        next = match session.read_request_body().await {
            Ok(piece) => piece,
            Err(e) => {
                let cut =
                    S3Error::new(S3ErrorCode::IncompleteBody, "The request body was cut off.");
                let _ = tx.send(Err(OriginError::Transport(e.to_string()))).await;
                return Err(cut.caused_by(e));
            }
        };
    }
    if sent < upload.file_len || tail != upload.trailer {
        // The origin gets a short body: it stores nothing.
        let _ = tx
            .send(Err(OriginError::Transport("malformed form".into())))
            .await;
        return Err(malformed());
    }
    Ok(())
}

/// The file's bytes as the PUT reads them.
struct Piped(mpsc::Receiver<Result<Bytes, OriginError>>);

#[async_trait]
impl ByteStream for Piped {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        self.0.recv().await.transpose()
    }
}

/// The origin's refusal as S3's code for it.
fn origin_error(e: OriginError) -> S3Error {
    let code = match e {
        OriginError::Status(403) => S3ErrorCode::AccessDenied,
        OriginError::Status(404) | OriginError::NotFound => S3ErrorCode::NoSuchBucket,
        OriginError::Status(400) => S3ErrorCode::InvalidRequest,
        OriginError::Status(s) if s < 500 => S3ErrorCode::InvalidRequest,
        _ => S3ErrorCode::ServiceUnavailable,
    };
    S3Error::new(code, "The origin refused the upload.").caused_by(e)
}

/// S3's answer to a stored POST.
async fn answer(
    session: &mut Session,
    ctx: &mut Ctx,
    upload: &PostUpload,
    location: &str,
    (bucket, key): (&str, &str),
    etag: &ETag,
) -> Result<u16, S3Error> {
    let internal = |e: Box<pingora::Error>| S3Error::internal(e);
    let (status, body, redirect) = match &upload.redirect {
        Some(to) => {
            let sep = if to.contains('?') { '&' } else { '?' };
            let query = format!(
                "bucket={}&key={}&etag={}",
                uri_encode(bucket, true),
                uri_encode(key, true),
                uri_encode(etag.as_str(), true)
            );
            (303, String::new(), Some(format!("{to}{sep}{query}")))
        }
        None if upload.status == 201 => {
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PostResponse><Location>{}</Location><Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></PostResponse>",
                xml_escape(location), xml_escape(bucket), xml_escape(key), xml_escape(etag.as_str())
            );
            (201, xml, None)
        }
        None => (upload.status, String::new(), None),
    };
    let mut resp = ResponseHeader::build(status, Some(6)).map_err(internal)?;
    resp.insert_header("etag", etag.as_str())
        .map_err(internal)?;
    resp.insert_header("location", redirect.as_deref().unwrap_or(location))
        .map_err(internal)?;
    resp.insert_header("x-amz-request-id", ctx.f.request_id.to_string())
        .map_err(internal)?;
    if status == 201 {
        resp.insert_header("content-type", "application/xml")
            .map_err(internal)?;
    }
    resp.insert_header("content-length", body.len().to_string())
        .map_err(internal)?;
    let empty = body.is_empty();
    session
        .write_response_header(Box::new(resp), empty)
        .await
        .map_err(internal)?;
    if !empty {
        session
            .write_response_body(Some(Bytes::from(body)), true)
            .await
            .map_err(internal)?;
    }
    Ok(status)
}
