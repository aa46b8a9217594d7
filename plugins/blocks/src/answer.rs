//! The header of an answer the cache writes itself: 200/206/304 for a held version, and the
//! validators a 412 carries.

use floe_core::S3Error;
use floe_filter::{CacheOutcome, FilterCtx};
use pingora::http::ResponseHeader;

use crate::mapping::Mapping;

/// `err` with the ETag and Last-Modified of `map`, as S3 sends them on a 412.
pub(crate) fn not_modified_headers(err: S3Error, map: &Mapping) -> S3Error {
    let err = err.with_header("etag", map.etag.as_str());
    match map.headers.iter().find(|(k, _)| k == "last-modified") {
        Some((_, v)) => err.with_header("last-modified", v.to_str().unwrap_or_default()),
        None => err,
    }
}

/// Header names the hit path sets, built once (a `&str` name is parsed on every insert).
const X_FLOE_CACHE: http::HeaderName = http::HeaderName::from_static("x-floe-cache");
const X_FLOE_ORIGIN_BYTES: http::HeaderName = http::HeaderName::from_static("x-floe-origin-bytes");
const X_FLOE_NODE: http::HeaderName = http::HeaderName::from_static("x-floe-node");
const X_AMZ_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-amz-request-id");
const X_FLOE_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-floe-request-id");

/// The replayed headers a 304 keeps (RFC 9110 §15.4.5: those a 200 would have sent that
/// describe the version and its caching).
const NOT_MODIFIED_KEEPS: [&str; 3] = ["last-modified", "cache-control", "expires"];

/// A cached answer's header. Per request it builds only the values that vary (lengths, range,
/// request id, the client's `response-*` overrides); the version's ETag and replayed headers
/// are values parsed once per mapping.
pub(crate) fn response_header(
    map: &Mapping,
    status: u16,
    checksums: bool,
    (first, last, len): (u64, u64, u64),
    (label, origin_bytes, node): (CacheOutcome, u64, Option<&str>),
    overrides: &[(http::HeaderName, http::HeaderValue)],
    ctx: &FilterCtx,
) -> Result<ResponseHeader, S3Error> {
    use http::header::{HeaderValue, ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, ETAG};
    let e = |e: Box<pingora::Error>| S3Error::internal(e);
    let mut r = ResponseHeader::build(status, Some(12)).map_err(e)?;
    // A 304 carries the version's validators and caching headers, no entity headers.
    let not_modified = status == 304;
    if !not_modified {
        r.insert_header(CONTENT_LENGTH, HeaderValue::from(len))
            .map_err(e)?;
    }
    match &map.etag_value {
        Some(v) => r.insert_header(ETAG, v.clone()),
        None => r.insert_header(ETAG, map.etag.as_str()),
    }
    .map_err(e)?;
    if !not_modified {
        r.insert_header(ACCEPT_RANGES, HeaderValue::from_static("bytes"))
            .map_err(e)?;
    }
    if status == 206 {
        r.insert_header(CONTENT_RANGE, format!("bytes {first}-{last}/{}", map.size))
            .map_err(e)?;
    }
    for (k, v) in &map.headers {
        if !not_modified || NOT_MODIFIED_KEEPS.contains(&k.as_str()) {
            r.append_header(k.clone(), v.clone()).map_err(e)?;
        }
    }
    // The client's response-* overrides replace what the version stored (not on a 304).
    if !not_modified {
        for (k, v) in overrides {
            r.insert_header(k.clone(), v.clone()).map_err(e)?;
        }
    }
    // Full-object checksums belong to whole-object answers only, as S3 sends them.
    if checksums && status == 200 {
        for (k, v) in map.checksums.iter().flatten() {
            r.append_header(k.clone(), v.clone()).map_err(e)?;
        }
    }
    r.insert_header(X_FLOE_CACHE, HeaderValue::from_static(label.as_str()))
        .map_err(e)?;
    r.insert_header(X_FLOE_ORIGIN_BYTES, HeaderValue::from(origin_bytes))
        .map_err(e)?;
    if let Some(n) = node {
        r.insert_header(X_FLOE_NODE, n).map_err(e)?;
    }
    let id = HeaderValue::from_bytes(&hex16(ctx.request_id.as_u64()))
        .map_err(|x| S3Error::internal(format!("request id: {x}")))?;
    r.insert_header(X_AMZ_REQUEST_ID, id.clone()).map_err(e)?;
    r.insert_header(X_FLOE_REQUEST_ID, id).map_err(e)?;
    Ok(r)
}

/// `id` as 16 uppercase hex digits (as `RequestId` displays), on the stack.
fn hex16(id: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = b"0123456789ABCDEF"[((id >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_render_as_their_display() {
        let id = floe_core::RequestId::next();
        assert_eq!(super::hex16(id.as_u64()), id.to_string().as_bytes());
        assert_eq!(&super::hex16(0xAB), b"00000000000000AB");
    }
}
