//! The peer API on the wire: paths, the fleet-secret authentication of every request, and the
//! head document.
//!
//! - `GET /v1/head?bucket=B&key=K` -> 200 with a [`HeadDoc`], 404, or 503.
//! - `GET /v1/blocks?bucket=B&key=K&etag=E&size=N&block=S&first=F&last=L&cached=C` -> 200
//!   with exactly the bytes `F..=L` of version `E` (`x-floe-node` names the owner,
//!   `x-floe-peer-source` says `hit` or `fill`), 412 when the owner cannot honour `E`, 400 for
//!   another block size; with `cached=1` (a donor ask), 404 unless all of them are held.
//!
//! Authentication: `x-floe-fleet-auth: <unix seconds>:<hex HMAC-SHA256(secret,
//! "<seconds>\n<method>\n<path and query>")>`, accepted within [`SKEW`] of the owner's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floe_core::{ETag, ObjectHead};
use hmac::{Hmac, Mac};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The authentication header.
pub const AUTH: &str = "x-floe-fleet-auth";
/// Names the node that answered.
pub const NODE: &str = "x-floe-node";
/// `hit` or `fill`.
pub const SOURCE: &str = "x-floe-peer-source";
/// How far a request's time may be from the owner's clock.
pub const SKEW: Duration = Duration::from_secs(300);

const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A query value, percent-encoded.
pub fn enc(v: &str) -> String {
    utf8_percent_encode(v, QUERY).to_string()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mac(secret: &[u8], secs: u64, method: &str, path: &str) -> String {
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    m.update(format!("{secs}\n{method}\n{path}").as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// The auth header value for a request.
pub fn sign(secret: &[u8], method: &str, path: &str) -> String {
    let secs = now();
    format!("{secs}:{}", mac(secret, secs, method, path))
}

/// Whether `header` authenticates `method path` now.
pub fn verify(secret: &[u8], method: &str, path: &str, header: &str) -> bool {
    let Some((secs, got)) = header.split_once(':') else {
        return false;
    };
    let Ok(secs) = secs.parse::<u64>() else {
        return false;
    };
    if now().abs_diff(secs) > SKEW.as_secs() {
        return false;
    }
    let want = mac(secret, secs, method, path);
    !want.is_empty()
        && bool::from(subtle::ConstantTimeEq::ct_eq(
            want.as_bytes(),
            got.as_bytes(),
        ))
}

/// An owner's answer to a head ask.
#[derive(Debug, Serialize, Deserialize)]
pub struct HeadDoc {
    /// ETag, quoted as S3 sends it.
    pub etag: String,
    /// Size.
    pub size: u64,
    /// Replayed headers.
    pub headers: Vec<(String, String)>,
    /// Full-object checksums, when known.
    pub checksums: Option<Vec<(String, String)>>,
}

impl HeadDoc {
    /// The document of `head`.
    pub fn of(head: &ObjectHead) -> Self {
        Self {
            etag: head.etag.as_str().to_owned(),
            size: head.size,
            headers: head.headers.clone(),
            checksums: head.checksums.clone(),
        }
    }

    /// Back to an [`ObjectHead`]; `None` for an unusable ETag.
    pub fn into_head(self) -> Option<ObjectHead> {
        Some(ObjectHead {
            etag: ETag::parse(&self.etag).ok()?,
            size: self.size,
            headers: self.headers,
            checksums: self.checksums,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_for_its_request_only() {
        let h = sign(b"secret-secret-secret", "GET", "/v1/head?bucket=a&key=b");
        assert!(verify(
            b"secret-secret-secret",
            "GET",
            "/v1/head?bucket=a&key=b",
            &h
        ));
        assert!(!verify(
            b"other-secret-secret!",
            "GET",
            "/v1/head?bucket=a&key=b",
            &h
        ));
        assert!(!verify(
            b"secret-secret-secret",
            "GET",
            "/v1/head?bucket=a&key=c",
            &h
        ));
        assert!(!verify(b"secret-secret-secret", "GET", "/x", "junk"));
        let old = format!("{}:{}", now() - 600, mac(b"s", now() - 600, "GET", "/x"));
        assert!(!verify(b"s", "GET", "/x", &old), "outside the skew window");
    }

    #[test]
    fn query_values_are_encoded_whole() {
        assert_eq!(enc("a b/c&d=é"), "a%20b%2Fc%26d%3D%C3%A9");
    }
}
