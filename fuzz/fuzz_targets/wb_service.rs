//! Write-back's side of the peer API (`floe_writeback::service::Store::answer`, after
//! `floe_writeback::wire::Call::parse`, which must encode back to what it decoded; the calls of
//! `/v2/x/wb/...` after the fleet's HMAC checked them): any method, path, query and body is
//! answered without a panic, with a status a peer acts on, and a fragment read answers exactly
//! the bytes it asked for or an error. Input: a method byte, a path length byte, the path, the
//! body. The store lives in a temporary directory for the run (16 MiB of fragments at most).
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use floe_core::fleet::PeerCall;
use floe_writeback::fragments::Fragments;
use floe_writeback::wire::Call;
use floe_writeback::journal::Journal;
use floe_writeback::service::Store;
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 4] = ["GET", "PUT", "POST", "DELETE"];

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("floe-fuzz-wb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fragments = Fragments::open(&dir.join("fragments"), 16 << 20).unwrap();
        let journal = Journal::open(&dir.join("journal")).unwrap();
        Store::new("fuzz".into(), fragments, journal)
    })
}

/// The value of `key` in the call's query.
fn query<'a>(path: &'a str, key: &str) -> Option<&'a str> {
    let q = path.split_once('?')?.1;
    q.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == key).map(|(_, v)| v)
}

fuzz_target!(|data: &[u8]| {
    let Some((&method, rest)) = data.split_first() else { return };
    let Some((&len, rest)) = rest.split_first() else { return };
    let (path, body) = rest.split_at(usize::from(len).min(rest.len()));
    let Ok(path) = std::str::from_utf8(path) else { return };
    let call = PeerCall {
        method: METHODS[usize::from(method) % METHODS.len()],
        path: path.to_owned(),
        body: Bytes::copy_from_slice(body),
    };
    // The typed call a path decodes to encodes back to a path that decodes to it again.
    if let Ok(typed) = Call::parse(call.method, &call.path) {
        assert_eq!(Call::parse(typed.method(), &typed.path()), Ok(typed.clone()), "{}", call.path);
    }
    let reply = store().answer(&call);
    assert!(
        matches!(reply.status, 200 | 400 | 404 | 409 | 410 | 416 | 500 | 507),
        "{} {}: status {}",
        call.method,
        call.path,
        reply.status
    );
    if call.method == "GET" && call.path.starts_with("/frag?") && reply.status == 200 {
        let asked: Option<u64> = query(&call.path, "len").and_then(|l| l.parse().ok());
        assert_eq!(Some(reply.body.len() as u64), asked, "a fragment read answered other bytes than asked");
    }
});
