//! The peer API on the wire: paths, the fleet-secret authentication of every request and
//! answer. The transport knows no plugin's calls: every request is `METHOD
//! /v2/x/<service>/<path below it>` to a service a plugin mounted.
//!
//! - Request head: `x-floe-fleet-auth: <unix seconds>:<nonce, 32 hex>:<hex HMAC-SHA256(secret,
//!   "<seconds>\n<nonce>\n<method>\n<path and query>\nlen:<body length>")>` and
//!   `x-floe-body-len`, accepted within [`SKEW`] of the receiver's clock and only once (a
//!   captured request cannot be replayed: [`ReplayGuard`]).
//! - Answer head: `x-floe-node` (who answered), `x-floe-peer-note` (the service's note),
//!   `x-floe-body-len`, and `x-floe-fleet-reply`: the hex BLAKE3 keyed tag ([`reply_tag`]) of
//!   the request's nonce with those and the status, so an answer cannot be forged or swapped.
//! - Bodies both ways: authenticated frames bound to the request's nonce ([`crate::frames`]).
//!
//! A node of an earlier release (the `/v1` peer API) answers none of this with a reply tag, and
//! its asks get a 503 here: either way the asker goes to the origin, never to a wrong answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::Sha256;

/// The authentication header.
pub const AUTH: &str = "x-floe-fleet-auth";
/// Names the node that answered.
pub const NODE: &str = "x-floe-node";
/// The service's note to its caller.
pub const NOTE: &str = "x-floe-peer-note";
/// The body's length (the framed body is longer).
pub const LEN: &str = "x-floe-body-len";
/// The answer's tag.
pub const REPLY: &str = "x-floe-fleet-reply";
/// Where mounted services are reached.
pub const PREFIX: &str = "/v2/x/";
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

/// What a request's signature says of its body: its length (each frame carries its own tag).
pub fn body_len(len: u64) -> String {
    format!("len:{len}")
}

/// The auth header value for a request whose body is described by `body` (see [`body_len`]),
/// and the nonce it carries (its body frames and answer are bound to it).
pub fn sign(secret: &[u8], method: &str, path: &str, body: &str) -> (String, u128) {
    let secs = now();
    let nonce_bits = rand::random::<u128>();
    let nonce = format!("{nonce_bits:032x}");
    let header = format!(
        "{secs}:{nonce}:{}",
        mac(secret, (secs, &nonce), method, path, body)
    );
    (header, nonce_bits)
}

/// The nonce of `header` when it authenticates `method path` with a body described by `body`
/// now, for the first time; `None` otherwise.
pub fn verify(
    secret: &[u8],
    (method, path, body): (&str, &str, &str),
    header: &str,
    seen: &ReplayGuard,
) -> Option<u128> {
    let mut parts = header.splitn(3, ':');
    let (Some(secs), Some(nonce), Some(got)) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    let (Ok(secs), Ok(nonce_bits)) = (secs.parse::<u64>(), u128::from_str_radix(nonce, 16)) else {
        return None;
    };
    if nonce.len() != 32 || now().abs_diff(secs) > SKEW.as_secs() {
        return None;
    }
    let want = mac(secret, (secs, nonce), method, path, body);
    let genuine = !want.is_empty()
        && bool::from(subtle::ConstantTimeEq::ct_eq(
            want.as_bytes(),
            got.as_bytes(),
        ));
    // Only a genuine request is remembered: junk cannot fill the guard.
    (genuine && seen.first_time(secs, nonce_bits)).then_some(nonce_bits)
}

/// The call's name in metrics: the first segment below the service (`blocks`, `frag`, ...).
pub fn kind_of(below: &str) -> &str {
    let path = below.split('?').next().unwrap_or("");
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    if first.is_empty() {
        return "call";
    }
    // At most 32 bytes (a label, not a path), cut at a character boundary.
    let mut end = first.len().min(32);
    while !first.is_char_boundary(end) {
        end -= 1;
    }
    &first[..end]
}

/// Whether an answer of `status` has no body at all in HTTP (1xx, 204, 304): it then carries
/// no frames either, and its head (tagged, with length 0) is the whole answer.
pub fn bodiless(status: u16) -> bool {
    matches!(status, 100..=199 | 204 | 304)
}

/// What an answer's head says, as [`reply_tag`] covers it.
#[derive(Debug, Clone, Copy)]
pub struct ReplyHead<'a> {
    /// Status.
    pub status: u16,
    /// The node that answered.
    pub node: &'a str,
    /// The service's note.
    pub note: &'a str,
    /// The body's length.
    pub len: u64,
}

/// The hex tag of the answer `head` to the request with `nonce`, under frame key `key`.
pub fn reply_tag(key: &[u8; 32], nonce: u128, head: ReplyHead<'_>) -> String {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&nonce.to_be_bytes());
    h.update(b"h");
    h.update(&head.status.to_be_bytes());
    for field in [head.node, head.note] {
        h.update(&(field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    h.update(&head.len.to_be_bytes());
    h.finalize().to_hex().to_string()
}

/// Whether `got` is the tag of `head` (constant time).
pub fn reply_holds(key: &[u8; 32], nonce: u128, head: ReplyHead<'_>, got: &str) -> bool {
    let want = reply_tag(key, nonce, head);
    bool::from(subtle::ConstantTimeEq::ct_eq(
        want.as_bytes(),
        got.as_bytes(),
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_for_its_request_and_body_length_once() {
        let secret = b"secret-secret-secret";
        let path = "/v2/x/blocks/forget";
        let body = body_len(14);
        let (h, nonce) = sign(secret, "POST", path, &body);
        let guard = ReplayGuard::default();
        let other = ReplayGuard::default();
        assert!(verify(b"other-secret-secret!", ("POST", path, &body), &h, &other).is_none());
        assert!(verify(secret, ("GET", path, &body), &h, &other).is_none());
        assert!(verify(secret, ("POST", "/v2/x/blocks/other", &body), &h, &other).is_none());
        assert!(verify(secret, ("POST", path, &body_len(15)), &h, &other).is_none());
        assert_eq!(
            verify(secret, ("POST", path, &body), &h, &guard),
            Some(nonce)
        );
        assert!(
            verify(secret, ("POST", path, &body), &h, &guard).is_none(),
            "a replay is refused"
        );
        let (again, _) = sign(secret, "POST", path, &body);
        assert!(verify(secret, ("POST", path, &body), &again, &guard).is_some());
        assert!(verify(secret, ("POST", path, &body), "1:2:3", &guard).is_none());
        assert!(verify(secret, ("POST", path, &body), "junk", &guard).is_none());
    }

    #[test]
    fn a_reply_tag_covers_status_node_note_length_and_nonce() {
        let key = crate::frames::key(b"secret");
        let head = ReplyHead {
            status: 200,
            node: "floe-0",
            note: "hit",
            len: 10,
        };
        let tag = reply_tag(&key, 7, head);
        assert!(reply_holds(&key, 7, head, &tag));
        assert!(!reply_holds(&key, 8, head, &tag));
        for other in [
            ReplyHead {
                status: 404,
                ..head
            },
            ReplyHead {
                node: "floe-1",
                ..head
            },
            ReplyHead {
                note: "fill",
                ..head
            },
            ReplyHead { len: 11, ..head },
            // A field boundary moved: "floe-0h" + "it" is not "floe-0" + "hit".
            ReplyHead {
                node: "floe-0h",
                note: "it",
                ..head
            },
        ] {
            assert!(!reply_holds(&key, 7, other, &tag), "{other:?}");
        }
        assert!(!reply_holds(&crate::frames::key(b"other"), 7, head, &tag));
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
            verify(b"s", ("GET", "/x", ""), &old, &ReplayGuard::default()).is_none(),
            "outside the skew window"
        );
    }

    #[test]
    fn query_values_are_encoded_whole() {
        assert_eq!(enc("a b/c&d=é"), "a%20b%2Fc%26d%3D%C3%A9");
    }
}
