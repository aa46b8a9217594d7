//! Responses Floe writes itself: S3 XML errors, ListBuckets, and Iceberg REST errors for the
//! catalog route.

use bytes::Bytes;
use floe_core::{BucketName, RequestId, S3Error};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

/// Whether a final response (not an informational `100 Continue`) has begun: after it nothing
/// else can be written, and a failure must drop the connection instead.
pub fn answered(session: &Session) -> bool {
    session
        .response_written()
        .is_some_and(|r| r.status.as_u16() >= 200)
}

/// Writes an S3 XML error (no body for HEAD, as S3 does). Returns the status written.
/// `close` ends the connection after the response (and says so, so clients do not reuse it).
pub async fn error(
    session: &mut Session,
    id: RequestId,
    err: &S3Error,
    close: bool,
) -> pingora::Result<u16> {
    let status = err.status();
    let resource = session.req_header().uri.path().to_owned();
    let body = err.to_xml(&resource, &id.to_string());
    let head = session.req_header().method == http::Method::HEAD;
    // An unread body means the connection cannot carry another request.
    let close = close || !session.is_body_done();
    if close {
        session.set_keepalive(None);
    }
    let mut resp = ResponseHeader::build(status, Some(5))?;
    if close {
        resp.insert_header("connection", "close")?;
    }
    resp.insert_header("content-type", "application/xml")?;
    resp.insert_header("content-length", body.len().to_string())?;
    resp.insert_header("x-amz-request-id", id.to_string())?;
    for (name, value) in &err.headers {
        resp.insert_header(*name, value.as_str())?;
    }
    session.write_response_header(Box::new(resp), head).await?;
    if !head {
        session
            .write_response_body(Some(Bytes::from(body)), true)
            .await?;
    }
    Ok(status)
}

/// Writes a ListAllMyBucketsResult with the given buckets.
pub async fn list_buckets(
    session: &mut Session,
    id: RequestId,
    buckets: &[(BucketName, String)],
    owner: &str,
) -> pingora::Result<u16> {
    let mut body = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    body.push_str(&format!(
        "<Owner><ID>{owner}</ID><DisplayName>{owner}</DisplayName></Owner><Buckets>"
    ));
    for (b, date) in buckets {
        // Bucket names are validated to [a-z0-9.-], so they need no escaping; the date is the
        // origin's, escaped in case it is not the ISO form S3 sends.
        let date = quick_xml::escape::escape(date.as_str());
        body.push_str(&format!(
            "<Bucket><Name>{b}</Name><CreationDate>{date}</CreationDate></Bucket>"
        ));
    }
    body.push_str("</Buckets></ListAllMyBucketsResult>");
    let mut resp = ResponseHeader::build(200, Some(4))?;
    resp.insert_header("content-type", "application/xml")?;
    resp.insert_header("content-length", body.len().to_string())?;
    resp.insert_header("x-amz-request-id", id.to_string())?;
    session.write_response_header(Box::new(resp), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await?;
    Ok(200)
}

/// Writes an Iceberg REST `ErrorModel` (the catalog route's failures: the catalog unreachable).
pub async fn catalog_error(
    session: &mut Session,
    status: u16,
    message: &str,
) -> pingora::Result<u16> {
    let kind = match status {
        503 => "ServiceUnavailableException",
        _ => "ServerErrorException",
    };
    let body = serde_json::json!({"error": {"message": message, "type": kind, "code": status}})
        .to_string();
    session.set_keepalive(None);
    let mut resp = ResponseHeader::build(status, Some(3))?;
    resp.insert_header("content-type", "application/json")?;
    resp.insert_header("content-length", body.len().to_string())?;
    resp.insert_header("connection", "close")?;
    session.write_response_header(Box::new(resp), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await?;
    Ok(status)
}
