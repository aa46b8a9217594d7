//! The peer wire: any auth header, any framed body and any block-cache ask or forget call
//! decode or are refused without a panic; a forget and an ask print and parse back to
//! themselves, and a sealed body opens to itself in any split.
#![no_main]

use bytes::Bytes;
use floe_blocks::asks::Ask;
use floe_blocks::forget::Forget;
use floe_core::fleet::PeerCall;
use floe_ring::frames::{key, Direction, Opener, Sealer};
use floe_ring::wire::{verify, ReplayGuard};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, Vec<u8>, String, Vec<String>, bool, usize)| {
    let (header, body, bucket, keys, every, cut) = input;
    let guard = ReplayGuard::default();
    assert!(verify(b"fleet-secret", ("GET", "/v2/x/blocks/head", "len:0"), &header, &guard).is_none());
    // Arbitrary bytes as a framed body: refused or opened, never a panic.
    let mut any = Opener::new(key(b"fleet-secret"), 1, Direction::Answer);
    let _ = any.push(Bytes::from(body.clone()));
    while any.next_ready().is_some() {}
    // The same bytes sealed, cut anywhere, open to themselves.
    let mut sealer = Sealer::new(key(b"s"), 7, Direction::Request);
    let mut wire = Vec::new();
    for p in sealer.seal(Bytes::from(body.clone())) {
        wire.extend_from_slice(&p);
    }
    wire.extend_from_slice(&sealer.end());
    let at = cut % (wire.len() + 1);
    let mut opener = Opener::new(key(b"s"), 7, Direction::Request);
    let mut out = Vec::new();
    for part in [&wire[..at], &wire[at..]] {
        opener.push(Bytes::copy_from_slice(part)).unwrap();
        while let Some(b) = opener.next_ready() {
            out.extend_from_slice(&b);
        }
    }
    assert!(opener.finish().is_ok());
    assert_eq!(out, body);
    // Any path as a block-cache ask: decoded asks print back to themselves.
    if let Some(Ok(ask)) = Ask::parse("GET", &bucket) {
        assert_eq!(Ask::parse("GET", &ask.path()), Some(Ok(ask)));
    }
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
