//! AWS's published SigV4 examples for S3 (docs.aws.amazon.com, "Signature Calculations for the
//! Authorization Header", "Query string authentication" and "Signature calculation for
//! streaming uploads"), verified by Floe's verifier. Keys are AWS's documented example keys.

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use floe_core::S3ErrorCode;
use floe_filter::BodyStage;
use floe_sigv4::chunked::{ChunkSigning, ChunkedStage};
use floe_sigv4::{RequestParts, Verifier};

const AKID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const HOST: &str = "examplebucket.s3.amazonaws.com";
/// 2013-05-24T00:00:00Z, the examples' clock.
const NOW: i64 = 1_369_353_600;
const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn verifier() -> Verifier {
    Verifier::new("us-east-1", [(AKID.to_owned(), SECRET.to_owned())])
}

fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    h
}

fn authz(signed: &str, sig: &str) -> String {
    format!("AWS4-HMAC-SHA256 Credential={AKID}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={sig}")
}

fn check(method: &str, path: &str, query: &str, h: &http::HeaderMap) -> Result<(), S3ErrorCode> {
    let req = RequestParts {
        method,
        raw_path: path,
        raw_query: query,
        headers: h,
    };
    match verifier().verify(&req, NOW) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(S3ErrorCode::AccessDenied),
        Err(e) => Err(e.code),
    }
}

#[test]
fn get_object_with_range() {
    let sig = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    let a = authz("host;range;x-amz-content-sha256;x-amz-date", sig);
    let h = headers(&[
        ("host", HOST),
        ("range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY),
        ("x-amz-date", "20130524T000000Z"),
        ("authorization", &a),
    ]);
    assert_eq!(check("GET", "/test.txt", "", &h), Ok(()));
    // A tampered signed header fails.
    let h2 = headers(&[
        ("host", HOST),
        ("range", "bytes=0-10"),
        ("x-amz-content-sha256", EMPTY),
        ("x-amz-date", "20130524T000000Z"),
        ("authorization", &a),
    ]);
    assert_eq!(
        check("GET", "/test.txt", "", &h2),
        Err(S3ErrorCode::SignatureDoesNotMatch)
    );
    // An x-amz-* header added after signing would take effect unsigned: S3 refuses it.
    for added in [
        "x-amz-meta-evil",
        "x-amz-copy-source",
        "x-amz-server-side-encryption",
    ] {
        let mut h3 = h.clone();
        h3.insert(http::HeaderName::from_static(added), "x".parse().unwrap());
        assert_eq!(
            check("GET", "/test.txt", "", &h3),
            Err(S3ErrorCode::AccessDenied),
            "{added}"
        );
    }
    // Headers outside x-amz-* need no signature (S3 lets clients add them).
    let mut h4 = h.clone();
    h4.insert("user-agent", "curl".parse().unwrap());
    assert_eq!(check("GET", "/test.txt", "", &h4), Ok(()));
}

#[test]
fn put_object() {
    let sig = "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd";
    let a = authz(
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        sig,
    );
    let h = headers(&[
        ("host", HOST),
        ("date", "Fri, 24 May 2013 00:00:00 GMT"),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        (
            "x-amz-content-sha256",
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
        ),
        ("authorization", &a),
    ]);
    assert_eq!(check("PUT", "/test$file.text", "", &h), Ok(()));
    assert_eq!(check("PUT", "/test%24file.text", "", &h), Ok(()));
}

#[test]
fn get_bucket_lifecycle() {
    let sig = "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543";
    let a = authz("host;x-amz-content-sha256;x-amz-date", sig);
    let h = headers(&[
        ("host", HOST),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-content-sha256", EMPTY),
        ("authorization", &a),
    ]);
    assert_eq!(check("GET", "/", "lifecycle", &h), Ok(()));
}

#[test]
fn list_objects() {
    let sig = "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
    let a = authz("host;x-amz-content-sha256;x-amz-date", sig);
    let h = headers(&[
        ("host", HOST),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-content-sha256", EMPTY),
        ("authorization", &a),
    ]);
    assert_eq!(check("GET", "/", "max-keys=2&prefix=J", &h), Ok(()));
    assert_eq!(
        check("GET", "/", "max-keys=3&prefix=J", &h),
        Err(S3ErrorCode::SignatureDoesNotMatch)
    );
}

#[test]
fn presigned_get() {
    let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    let h = headers(&[("host", HOST)]);
    assert_eq!(check("GET", "/test.txt", q, &h), Ok(()));
    let req = RequestParts {
        method: "GET",
        raw_path: "/test.txt",
        raw_query: q,
        headers: &h,
    };
    let late = verifier().verify(&req, NOW + 86_401).unwrap_err();
    assert_eq!(late.code, S3ErrorCode::AccessDenied);
    assert!(late.message.contains("expired"));
}

#[test]
fn wrong_key_skew_and_region() {
    let sig = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    let a = authz("host;range;x-amz-content-sha256;x-amz-date", sig).replace(AKID, "AKIDUNKNOWN");
    let h = headers(&[
        ("host", HOST),
        ("range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY),
        ("x-amz-date", "20130524T000000Z"),
        ("authorization", &a),
    ]);
    assert_eq!(
        check("GET", "/test.txt", "", &h),
        Err(S3ErrorCode::InvalidAccessKeyId)
    );

    let a = authz("host;range;x-amz-content-sha256;x-amz-date", sig);
    let h = headers(&[
        ("host", HOST),
        ("range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY),
        ("x-amz-date", "20130524T000000Z"),
        ("authorization", &a),
    ]);
    let req = RequestParts {
        method: "GET",
        raw_path: "/test.txt",
        raw_query: "",
        headers: &h,
    };
    assert_eq!(
        verifier().verify(&req, NOW + 901).unwrap_err().code,
        S3ErrorCode::RequestTimeTooSkewed
    );
    assert!(verifier().verify(&req, NOW + 899).is_ok());
    let eu = Verifier::new("eu-west-1", [(AKID.to_owned(), SECRET.to_owned())]);
    assert_eq!(
        eu.verify(&req, NOW).unwrap_err().code,
        S3ErrorCode::AuthorizationHeaderMalformed
    );
}

fn chunked_body(chunks: &[(usize, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (len, sig) in chunks {
        out.extend_from_slice(format!("{len:x};chunk-signature={sig}\r\n").as_bytes());
        out.extend(std::iter::repeat_n(b'a', *len));
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn signed_stage() -> ChunkedStage {
    let signing = ChunkSigning {
        key: floe_sigv4::auth::signing_key(SECRET, "20130524", "us-east-1", "s3"),
        amz_date: "20130524T000000Z".into(),
        scope: "20130524/us-east-1/s3/aws4_request".into(),
        seed: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9".into(),
    };
    ChunkedStage::new(Some(signing), None, 66_560).unwrap()
}

const CHUNKS: [(usize, &str); 3] = [
    (
        65_536,
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    ),
    (
        1_024,
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    ),
    (
        0,
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
    ),
];

#[test]
fn streaming_seed_signature() {
    let sig = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
    let a = authz("content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class", sig);
    let h = headers(&[
        ("host", "s3.amazonaws.com"),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ("authorization", &a),
        ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        ("content-encoding", "aws-chunked"),
        ("x-amz-decoded-content-length", "66560"),
        ("content-length", "66824"),
    ]);
    assert_eq!(
        check("PUT", "/examplebucket/chunkObject.txt", "", &h),
        Ok(())
    );
}

#[test]
fn streaming_chunks_decode_in_any_split() {
    let body = chunked_body(&CHUNKS);
    assert_eq!(body.len(), 66_824);
    for split in [1usize, 7, 86, 4096, 65_600, body.len()] {
        let mut stage = signed_stage();
        let mut decoded = Vec::new();
        let pieces: Vec<&[u8]> = body.chunks(split).collect();
        for (i, p) in pieces.iter().enumerate() {
            let mut b = Some(Bytes::copy_from_slice(p));
            stage.feed(&mut b, i + 1 == pieces.len()).unwrap();
            decoded.extend_from_slice(&b.unwrap_or_default());
        }
        assert_eq!(decoded.len(), 66_560, "split {split}");
        assert!(decoded.iter().all(|&c| c == b'a'));
    }
}

#[test]
fn streaming_tampered_chunk_is_refused_before_forwarding() {
    let mut body = chunked_body(&CHUNKS);
    body[100] = b'b';
    let mut stage = signed_stage();
    let mut b = Some(Bytes::from(body));
    assert_eq!(
        stage.feed(&mut b, true).unwrap_err().code,
        S3ErrorCode::SignatureDoesNotMatch
    );
    // A body cut short is incomplete, never passed as whole.
    let body = chunked_body(&CHUNKS[..2]);
    let mut stage = signed_stage();
    let mut b = Some(Bytes::from(body));
    assert_eq!(
        stage.feed(&mut b, true).unwrap_err().code,
        S3ErrorCode::IncompleteBody
    );
}

/// Feeds `body` in pieces of `split` bytes; returns the bytes released before the first error
/// and that error.
fn released_until_error(
    body: &[u8],
    split: usize,
    mut stage: ChunkedStage,
) -> (usize, Option<S3ErrorCode>) {
    let pieces: Vec<&[u8]> = body.chunks(split).collect();
    let mut released = 0;
    for (i, p) in pieces.iter().enumerate() {
        let mut b = Some(Bytes::copy_from_slice(p));
        if let Err(e) = stage.feed(&mut b, i + 1 == pieces.len()) {
            return (released, Some(e.code));
        }
        released += b.map_or(0, |b| b.len());
    }
    (released, None)
}

#[test]
fn a_bad_final_signature_never_releases_the_whole_body() {
    // The origin is told the decoded length: the whole body released means it commits.
    let mut bad = CHUNKS;
    bad[2].1 = "0000000000000000000000000000000000000000000000000000000000000000";
    let body = chunked_body(&bad);
    for split in [1usize, 7, 4096, 65_600, 66_600, body.len()] {
        let (released, err) = released_until_error(&body, split, signed_stage());
        assert_eq!(
            err,
            Some(S3ErrorCode::SignatureDoesNotMatch),
            "split {split}"
        );
        assert!(
            released < 66_560,
            "split {split}: {released} bytes released"
        );
    }
    // A body that stops after its last data chunk (the client reset) is incomplete, and the
    // origin never had all of it either.
    let body = chunked_body(&CHUNKS[..2]);
    for split in [7usize, 66_000, body.len()] {
        let (released, err) = released_until_error(&body, split, signed_stage());
        assert_eq!(err, Some(S3ErrorCode::IncompleteBody), "split {split}");
        assert!(
            released < 66_560,
            "split {split}: {released} bytes released"
        );
    }
}

#[test]
fn a_short_decoded_length_is_refused_before_its_excess_is_released() {
    let signing = ChunkSigning {
        key: floe_sigv4::auth::signing_key(SECRET, "20130524", "us-east-1", "s3"),
        amz_date: "20130524T000000Z".into(),
        scope: "20130524/us-east-1/s3/aws4_request".into(),
        seed: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9".into(),
    };
    // 65,700: the first chunk (65,622 bytes framed) arrives whole before the second one.
    for split in [4096usize, 65_700] {
        let stage = ChunkedStage::new(Some(signing.clone()), None, 65_536).unwrap();
        let (released, err) = released_until_error(&chunked_body(&CHUNKS), split, stage);
        assert_eq!(err, Some(S3ErrorCode::IncompleteBody), "split {split}");
        assert!(
            released < 65_536,
            "split {split}: {released} bytes released: a prefix taken as whole"
        );
    }
}
