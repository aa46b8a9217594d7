//! POST Object (browser form uploads) at the SigV4 stage: reads the form up to the file,
//! verifies its policy, and hands the proxy what it forwards as a PUT ([`PostUpload`]): the
//! key (in the filter context, for the stages after this one), the headers the form sets, the
//! file's length and the bytes of it already read.

use bytes::{Bytes, BytesMut};
use floe_core::{ObjectKey, S3Error, S3ErrorCode, S3Op};
use floe_filter::FilterCtx;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::post_form::{self, Form};
use crate::post_policy::PostRequest;
use crate::verify::Verifier;

/// A verified form upload, for the proxy to forward (kept in `FilterCtx::ext`).
#[derive(Debug, Clone)]
pub struct PostUpload {
    /// Headers of the PUT: content type, metadata, cache and storage fields of the form.
    pub headers: Vec<(String, String)>,
    /// Body bytes read past the file part's headers (the file's first bytes, perhaps all
    /// of it and the closing boundary).
    pub read_ahead: Bytes,
    /// The file's length: the Content-Length less the form around the file.
    pub file_len: u64,
    /// What must follow the file's bytes to end the body.
    pub trailer: Vec<u8>,
    /// `success_action_redirect` (or `redirect`): answer 303 to it.
    pub redirect: Option<String>,
    /// `success_action_status`: 200, 201 or (default) 204.
    pub status: u16,
}

/// Form fields that become headers of the PUT as they are.
const CARRIED: [&str; 6] = [
    "cache-control",
    "content-type",
    "content-disposition",
    "content-encoding",
    "expires",
    "x-amz-website-redirect-location",
];

/// Reads and verifies the form of a POST Object; sets the context's key and access key.
pub(crate) async fn admit(
    verifier: &Verifier,
    anonymous: &[S3Op],
    session: &mut Session,
    ctx: &mut FilterCtx,
    now: i64,
) -> Result<(), S3Error> {
    let headers = &session.req_header().headers;
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let boundary = text("content-type")
        .and_then(post_form::boundary)
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::PreconditionFailed,
                "Bucket POST must be of the enclosure-type multipart/form-data",
            )
        })?;
    let body_len: u64 = text("content-length")
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::MissingContentLength,
                "You must provide the Content-Length HTTP header.",
            )
        })?;
    let expect_continue = text("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if expect_continue {
        let cont = ResponseHeader::build(100, Some(0)).map_err(incomplete)?;
        session
            .write_response_header(Box::new(cont), false)
            .await
            .map_err(incomplete)?;
    }
    let (form, mut buf) = read_form(session, &boundary).await?;
    let trailer = post_form::trailer(&boundary);
    let around = (form.data_start + trailer.len()) as u64;
    let file_len = body_len.checked_sub(around).ok_or_else(|| {
        S3Error::new(
            S3ErrorCode::MalformedPOSTRequest,
            "The body of your POST request is not well-formed multipart/form-data.",
        )
    })?;
    if form.get("tagging").is_some() {
        // Its XML would have to become x-amz-tagging; refused rather than silently dropped.
        return Err(S3Error::new(
            S3ErrorCode::NotImplemented,
            "Floe does not carry the tagging field of a POST upload; tag the object after it.",
        ));
    }
    let key = object_key(&form)?;
    let bucket = ctx.bucket.as_ref().map_or("", |b| b.as_str());
    let post = PostRequest {
        form: &form,
        bucket,
        file_len,
    };
    match verifier.verify_post(&post, now)? {
        Some(access_key) => ctx.access_key = Some(access_key),
        None if anonymous.contains(&S3Op::PostObject) => {}
        None => return Err(S3Error::new(S3ErrorCode::AccessDenied, "Access Denied")),
    }
    ctx.key = Some(key);
    ctx.ext.insert(PostUpload {
        headers: put_headers(&form),
        read_ahead: buf.split_off(form.data_start).freeze(),
        file_len,
        trailer,
        redirect: form
            .get("success_action_redirect")
            .or_else(|| form.get("redirect"))
            .map(str::to_owned),
        status: match form.get("success_action_status") {
            Some("200") => 200,
            Some("201") => 201,
            _ => 204,
        },
    });
    Ok(())
}

/// Reads the body until the file part begins.
async fn read_form(session: &mut Session, boundary: &str) -> Result<(Form, BytesMut), S3Error> {
    let mut buf = BytesMut::new();
    loop {
        if let Some(form) = post_form::parse(&buf, boundary)? {
            return Ok((form, buf));
        }
        match session.read_request_body().await.map_err(incomplete)? {
            Some(piece) => buf.extend_from_slice(&piece),
            None => {
                return Err(S3Error::new(
                    S3ErrorCode::MalformedPOSTRequest,
                    "The body of your POST request is not well-formed multipart/form-data: it ended before the file.",
                ))
            }
        }
    }
}

/// The key the form names, `${filename}` replaced by the file's name as S3 does.
fn object_key(form: &Form) -> Result<ObjectKey, S3Error> {
    let key = form.get("key").ok_or_else(|| {
        S3Error::new(
            S3ErrorCode::InvalidArgument,
            "Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields.",
        )
    })?;
    let key = key.replace("${filename}", form.file_name.as_deref().unwrap_or(""));
    ObjectKey::parse(&key).map_err(|e| S3Error::new(S3ErrorCode::InvalidArgument, e.to_string()))
}

/// The PUT's headers from the form: the carried fields, metadata, ACL, storage class and
/// server-side encryption, as S3 applies them to the stored object.
fn put_headers(form: &Form) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in &form.fields {
        let carried = CARRIED.contains(&name.as_str())
            || name.starts_with("x-amz-meta-")
            || name.starts_with("x-amz-server-side-encryption")
            || name.starts_with("x-amz-object-lock-")
            || name == "x-amz-storage-class";
        if carried {
            out.push((name.clone(), value.clone()));
        } else if name == "acl" {
            out.push(("x-amz-acl".to_owned(), value.clone()));
        }
    }
    out
}

fn incomplete(e: Box<pingora::Error>) -> S3Error {
    S3Error::new(
        S3ErrorCode::IncompleteBody,
        "The request body could not be read to its end.",
    )
    .caused_by(e)
}
