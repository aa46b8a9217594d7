//! SigV4 header and presigned-query parsing and canonicalisation over any text: no panic, and
//! canonical forms are stable (canonicalising a canonical path or query changes nothing).
#![no_main]

use floe_sigv4::{auth, canonical};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, String, String)| {
    let (authz, query, path) = input;
    let _ = auth::parse_header(&authz, Some("20130524T000000Z"));
    let _ = auth::parse_header(&authz, None);
    let _ = auth::parse_query(&query);
    let _ = auth::parse_amz_date(&authz);
    let _ = auth::http_date_to_amz(&authz);
    let uri = canonical::canonical_uri(&path);
    assert_eq!(
        canonical::canonical_uri(&uri),
        uri,
        "canonical_uri is not stable for {path:?}"
    );
    let q = canonical::canonical_query(&query, "");
    assert_eq!(
        canonical::canonical_query(&q, ""),
        q,
        "canonical_query is not stable for {query:?}"
    );
});
