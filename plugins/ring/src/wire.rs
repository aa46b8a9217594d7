//! The peer API on the wire: paths, the fleet-secret authentication of every request, and the
//! head document.
//!
//! - `GET /v1/head?bucket=B&key=K` -> 200 with a [`HeadDoc`], 404, or 503.
//! - `GET /v1/blocks?bucket=B&key=K&etag=E&size=N&block=S&first=F&last=L&cached=C` -> 200
//!   with exactly the bytes `F..=L` of version `E` (`x-floe-node` names the owner,
//!   `x-floe-peer-source` says `hit` or `fill`), 412 when the owner cannot honour `E`, 400 for
//!   another block size; with `cached=1` (a donor ask), 404 unless all of them are held.
//!
//! Authentication: `x-floe-fleet-auth: <unix seconds>:<nonce, 32 hex>:<hex HMAC-SHA256(secret,
//! "<seconds>\n<nonce>\n<method>\n<path and query>\n<hex SHA-256 of the body>")>`, accepted
//! within [`SKEW`] of the owner's clock and only once (a captured request cannot be replayed:
//! [`ReplayGuard`]), and only for the body it was signed with.

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

fn mac(secret: &[u8], (secs, nonce): (u64, &str), method: &str, path: &str, body: &str) -> String {
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    m.update(format!("{secs}\n{nonce}\n{method}\n{path}\n{body}").as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// The hex SHA-256 of a request body, as [`sign`] and [`verify`] take it.
pub fn body_hash(body: &[u8]) -> String {
    hex::encode(<Sha256 as sha2::Digest>::digest(body))
}

/// The auth header value for a request with a body whose [`body_hash`] is `body`.
pub fn sign(secret: &[u8], method: &str, path: &str, body: &str) -> String {
    let secs = now();
    let nonce = format!("{:032x}", rand::random::<u128>());
    format!(
        "{secs}:{nonce}:{}",
        mac(secret, (secs, &nonce), method, path, body)
    )
}

/// Whether `header` authenticates `method path` with a body hashing to `body` now, for the
/// first time.
pub fn verify(
    secret: &[u8],
    (method, path, body): (&str, &str, &str),
    header: &str,
    seen: &ReplayGuard,
) -> bool {
    let mut parts = header.splitn(3, ':');
    let (Some(secs), Some(nonce), Some(got)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(secs), Ok(nonce_bits)) = (secs.parse::<u64>(), u128::from_str_radix(nonce, 16)) else {
        return false;
    };
    if nonce.len() != 32 || now().abs_diff(secs) > SKEW.as_secs() {
        return false;
    }
    let want = mac(secret, (secs, nonce), method, path, body);
    let genuine = !want.is_empty()
        && bool::from(subtle::ConstantTimeEq::ct_eq(
            want.as_bytes(),
            got.as_bytes(),
        ));
    // Only a genuine request is remembered: junk cannot fill the guard.
    genuine && seen.first_time(secs, nonce_bits)
}

/// The nonces of requests accepted within the last [`SKEW`] (and up to [`SKEW`] ahead):
/// sharded by nonce, each shard's entries bucketed by minute and dropped once outside the
/// window, so memory follows the request rate over the window (16 bytes a request).
pub struct ReplayGuard {
    shards: Vec<std::sync::Mutex<std::collections::BTreeMap<u64, std::collections::HashSet<u128>>>>,
}

const GUARD_SHARDS: usize = 16;
const GUARD_BUCKET_SECS: u64 = 60;

impl Default for ReplayGuard {
    fn default() -> Self {
        Self {
            shards: (0..GUARD_SHARDS).map(|_| Default::default()).collect(),
        }
    }
}

impl ReplayGuard {
    /// Records `nonce` of a request signed at `secs`; `false` when it was seen before.
    pub fn first_time(&self, secs: u64, nonce: u128) -> bool {
        let shard = &self.shards[(nonce % GUARD_SHARDS as u128) as usize];
        let Ok(mut buckets) = shard.lock() else {
            return false;
        };
        let oldest = now().saturating_sub(SKEW.as_secs()) / GUARD_BUCKET_SECS;
        while let Some((&b, _)) = buckets.first_key_value() {
            if b >= oldest {
                break;
            }
            buckets.pop_first();
        }
        let bucket = secs / GUARD_BUCKET_SECS;
        if buckets.values().any(|set| set.contains(&nonce)) {
            return false;
        }
        buckets.entry(bucket).or_default().insert(nonce)
    }
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
    fn a_signature_holds_for_its_request_and_body_once() {
        let secret = b"secret-secret-secret";
        let path = "/v1/x/blocks/forget";
        let body = body_hash(b"{\"bucket\":\"a\"}");
        let h = sign(secret, "POST", path, &body);
        let guard = ReplayGuard::default();
        let other = ReplayGuard::default();
        assert!(!verify(
            b"other-secret-secret!",
            ("POST", path, &body),
            &h,
            &other
        ));
        assert!(!verify(secret, ("GET", path, &body), &h, &other));
        assert!(!verify(
            secret,
            ("POST", "/v1/x/blocks/other", &body),
            &h,
            &other
        ));
        let tampered = body_hash(b"{\"bucket\":\"b\"}");
        assert!(!verify(secret, ("POST", path, &tampered), &h, &other));
        assert!(verify(secret, ("POST", path, &body), &h, &guard));
        assert!(
            !verify(secret, ("POST", path, &body), &h, &guard),
            "a replay is refused"
        );
        let again = sign(secret, "POST", path, &body);
        assert!(verify(secret, ("POST", path, &body), &again, &guard));
        assert!(!verify(secret, ("POST", path, &body), "1:2:3", &guard));
        assert!(!verify(secret, ("POST", path, &body), "junk", &guard));
    }

    #[test]
    fn an_old_signature_is_refused() {
        let secs = now() - 600;
        let nonce = "0".repeat(32);
        let old = format!(
            "{secs}:{nonce}:{}",
            mac(b"s", (secs, &nonce), "GET", "/x", "")
        );
        assert!(
            !verify(b"s", ("GET", "/x", ""), &old, &ReplayGuard::default()),
            "outside the skew window"
        );
    }

    #[test]
    fn query_values_are_encoded_whole() {
        assert_eq!(enc("a b/c&d=é"), "a%20b%2Fc%26d%3D%C3%A9");
    }
}
