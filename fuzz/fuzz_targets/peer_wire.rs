//! The peer wire: any auth header and any forget call decode or are refused without a panic,
//! and a forget prints and parses back to itself.
#![no_main]

use bytes::Bytes;
use floe_blocks::forget::Forget;
use floe_core::fleet::PeerCall;
use floe_ring::wire::{verify, ReplayGuard};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, Vec<u8>, String, Vec<String>, bool)| {
    let (header, body, bucket, keys, every) = input;
    let guard = ReplayGuard::default();
    assert!(!verify(
        b"fleet-secret",
        ("GET", "/v1/head", ""),
        &header,
        &guard
    ));
    let call = PeerCall {
        method: "POST",
        path: "/forget".into(),
        body: Bytes::from(body),
    };
    let _ = Forget::decode(&call);
    let forget = Forget {
        bucket,
        keys,
        every,
    };
    assert_eq!(Forget::decode(&forget.call()), Ok(forget));
});
