//! Percent-encoding as S3 and SigV4 use it: one encoding of everything but RFC 3986
//! unreserved characters (and '/' in object paths), and lossy decoding.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything but RFC 3986 unreserved characters is encoded.
const URI_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// As [`URI_SET`], but '/' stays (object paths).
const PATH_SET: &AsciiSet = &URI_SET.remove(b'/');

/// URI-encodes a decoded string as SigV4 wants (unreserved kept, everything else %XX).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let set = if keep_slash { PATH_SET } else { URI_SET };
    utf8_percent_encode(s, set).to_string()
}

/// Percent-decodes a path into a string; `None` when the bytes are not UTF-8 (S3 names keys
/// in UTF-8 only).
pub fn decode_strict(s: &str) -> Option<String> {
    percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// Percent-decodes bytes into a string, lossily for invalid UTF-8.
pub fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The `key=value` pairs of a query (still encoded), sorted by key; `None` when a key is
/// repeated (a call between nodes names each field once, so a repeat is a forged or broken one).
pub fn unique_pairs(query: &str) -> Option<Vec<(&str, &str)>> {
    let mut pairs: Vec<(&str, &str)> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    pairs.sort_unstable();
    (!pairs.windows(2).any(|w| w[0].0 == w[1].0)).then_some(pairs)
}
