//! The aws-chunked decoder over any bytes split any way, and over valid signed bodies with one
//! byte tampered: it never panics, and it never releases a byte of a chunk whose signature
//! fails, nor all of a body whose end fails (the origin, told the decoded length, would commit).
#![no_main]

use bytes::Bytes;
use floe_filter::BodyStage;
use floe_sigv4::auth::{sign, signing_key};
use floe_sigv4::chunked::{ChunkSigning, ChunkedStage};
use libfuzzer_sys::fuzz_target;

const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn signing() -> ChunkSigning {
    ChunkSigning {
        key: signing_key("secret", "20130524", "us-east-1", "s3"),
        amz_date: "20130524T000000Z".into(),
        scope: "20130524/us-east-1/s3/aws4_request".into(),
        seed: "0".repeat(64),
    }
}

/// Feeds `body` cut at `cuts`; returns the bytes released and whether it ended well.
fn feed(mut stage: ChunkedStage, body: &[u8], cuts: &[u8]) -> (usize, bool) {
    let mut at = 0;
    let mut released = 0;
    let mut i = 0;
    while at < body.len() || (at == 0 && body.is_empty()) {
        let step = cuts.get(i).map_or(body.len(), |c| 1 + *c as usize * 7);
        let end = (at + step).min(body.len());
        let mut piece = Some(Bytes::copy_from_slice(&body[at..end]));
        let last = end == body.len();
        if stage.feed(&mut piece, last).is_err() {
            return (released, false);
        }
        released += piece.map_or(0, |p| p.len());
        at = end;
        i += 1;
        if last {
            break;
        }
    }
    (released, true)
}

/// A valid signed body of `data` in chunks of `chunk` bytes.
fn signed_body(data: &[u8], chunk: usize) -> (Vec<u8>, Vec<(usize, usize)>) {
    let s = signing();
    let mut prev = s.seed.clone();
    let mut out = Vec::new();
    let mut spans = Vec::new();
    let pieces: Vec<&[u8]> = data.chunks(chunk).chain(std::iter::once(&[][..])).collect();
    for p in pieces {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{prev}\n{EMPTY}\n{}",
            s.amz_date,
            s.scope,
            floe_sigv4::canonical::sha256_hex(p)
        );
        prev = sign(&s.key, &sts);
        out.extend_from_slice(format!("{:x};chunk-signature={prev}\r\n", p.len()).as_bytes());
        spans.push((out.len(), p.len()));
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    (out, spans)
}

fuzz_target!(|input: (Vec<u8>, Vec<u8>, u16, u16, bool)| {
    let (data, cuts, chunk, tamper, arbitrary) = input;
    if arbitrary {
        // Any bytes: no panic, in every mode.
        let _ = feed(
            ChunkedStage::new(Some(signing()), None, data.len() as u64).unwrap(),
            &data,
            &cuts,
        );
        let stage =
            ChunkedStage::new(None, Some("x-amz-checksum-crc32"), data.len() as u64).unwrap();
        let _ = feed(stage, &data, &cuts);
        return;
    }
    let chunk = 1 + chunk as usize % 4096;
    let (mut body, spans) = signed_body(&data, chunk);
    let stage = || ChunkedStage::new(Some(signing()), None, data.len() as u64).unwrap();
    let (released, ok) = feed(stage(), &body, &cuts);
    assert!(ok, "a valid body was refused");
    assert_eq!(released, data.len());
    // Tamper one byte of one chunk's data: nothing of that chunk (or after) is released, and
    // never the whole body.
    let with_data: Vec<&(usize, usize)> = spans.iter().filter(|(_, n)| *n > 0).collect();
    if with_data.is_empty() {
        return;
    }
    let (start, len) = *with_data[tamper as usize % with_data.len()];
    let index = spans.iter().position(|s| s.0 == start).unwrap_or(0);
    body[start + tamper as usize % len] ^= 0x01;
    let before: usize = spans[..index].iter().map(|s| s.1).sum();
    let (released, ok) = feed(stage(), &body, &cuts);
    assert!(!ok, "a tampered body was accepted");
    assert!(
        released <= before,
        "released {released} bytes, the tampered chunk starts at {before}"
    );
    assert!(released < data.len());
});
