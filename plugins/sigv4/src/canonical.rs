//! Canonical request construction, as SigV4 defines it for S3 (no path normalisation, single
//! URI encoding).

use sha2::{Digest, Sha256};

pub use floe_core::uri::{decode, uri_encode};

/// The canonical URI: the raw path decoded and re-encoded once, as S3 compares it.
pub fn canonical_uri(raw_path: &str) -> String {
    if raw_path.is_empty() {
        return "/".to_owned();
    }
    uri_encode(&decode(raw_path), true)
}

/// The canonical query string: pairs decoded, re-encoded, sorted; `skip` names are dropped.
pub fn canonical_query(raw_query: &str, skip: &str) -> String {
    let mut pairs: Vec<(String, String)> = raw_query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (uri_encode(&decode(k), false), uri_encode(&decode(v), false))
        })
        .filter(|(k, _)| k != skip)
        .collect();
    pairs.sort();
    let mut out = String::with_capacity(raw_query.len() + 8);
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

/// Trims a header value and folds runs of spaces into one, as SigV4 requires.
fn fold_value(v: &[u8], out: &mut String) {
    let s = String::from_utf8_lossy(v);
    let mut last_space = false;
    for c in s.trim().chars() {
        if c == ' ' || c == '\t' {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            out.push(c);
            last_space = false;
        }
    }
}

/// The canonical header block for `signed` (lowercase names, `;`-separated) from `headers`.
/// Returns `None` when a signed header is absent from the request.
pub fn canonical_headers(headers: &http::HeaderMap, signed: &str) -> Option<String> {
    let mut out = String::with_capacity(256);
    for name in signed.split(';') {
        let mut values = headers.get_all(name).iter().peekable();
        values.peek()?;
        out.push_str(name);
        out.push(':');
        for (i, v) in values.enumerate() {
            if i > 0 {
                out.push(',');
            }
            fold_value(v.as_bytes(), &mut out);
        }
        out.push('\n');
    }
    Some(out)
}

/// Hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Assembles the canonical request text.
pub fn canonical_request(
    method: &str,
    uri: &str,
    query: &str,
    headers: &str,
    signed: &str,
    payload: &str,
) -> String {
    format!("{method}\n{uri}\n{query}\n{headers}\n{signed}\n{payload}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_sigv4() {
        assert_eq!(canonical_uri("/test%24file.text"), "/test%24file.text");
        assert_eq!(canonical_uri("/a b/c=d"), "/a%20b/c%3Dd");
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(
            canonical_query("prefix=somePrefix&marker=someMarker&max-keys=20", ""),
            "marker=someMarker&max-keys=20&prefix=somePrefix"
        );
        assert_eq!(canonical_query("lifecycle", ""), "lifecycle=");
        assert_eq!(
            canonical_query("a=1&X-Amz-Signature=zz", "X-Amz-Signature"),
            "a=1"
        );
    }

    #[test]
    fn folds_header_values() {
        let mut h = http::HeaderMap::new();
        h.insert("host", "example".parse().unwrap());
        h.append("x-amz-meta-a", "  a   b  ".parse().unwrap());
        h.append("x-amz-meta-a", "c".parse().unwrap());
        assert_eq!(
            canonical_headers(&h, "host;x-amz-meta-a").unwrap(),
            "host:example\nx-amz-meta-a:a b,c\n"
        );
        assert!(canonical_headers(&h, "host;range").is_none());
    }
}
