//! The request path in-process: a whole floe-proxy (the server `main.rs` runs) in front of a
//! real S3 origin (s3s-fs) that records what it gets, asserting on bytes, statuses, S3 error
//! codes and the requests that reach the origin.

// A test crate: its helpers (not only its #[test]s) unwrap.
#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::sync::OnceLock;

use support::{signed, Origin, BUCKET, CLIENT_SECRET};

struct Bench {
    origin: Origin,
    /// `filters: [sigv4, blocks]`.
    cached: String,
    _dir: tempfile::TempDir,
}

/// One origin and one proxy for the whole file: each test uses keys of its own.
fn bench() -> &'static Bench {
    static BENCH: OnceLock<Bench> = OnceLock::new();
    // Built on a thread of its own: the server starts its plugins on a runtime of its own,
    // which cannot start inside a test's runtime.
    BENCH.get_or_init(|| {
        std::thread::spawn(|| {
            let dir = tempfile::tempdir().unwrap();
            let origin = support::start_origin(&dir.path().join("origin"));
            let addr = support::start_proxy(dir.path(), &origin, "[sigv4, blocks]");
            Bench {
                origin,
                cached: format!("http://{addr}/{BUCKET}"),
                _dir: dir,
            }
        })
        .join()
        .unwrap()
    })
}

async fn get(key: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let url = format!("{}/{key}", bench().cached);
    let client = reqwest::Client::new();
    signed(&client, "GET", &url, headers, Vec::new(), CLIENT_SECRET)
        .send()
        .await
        .unwrap()
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

fn object(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_read_is_served_from_the_cache_without_the_origin() {
    let b = bench();
    let bytes = object(1, 300_000);
    b.origin.put_file("twice/data.parquet", &bytes);

    let first = get("twice/data.parquet", &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-floe-cache"), "miss");
    assert_eq!(first.bytes().await.unwrap().as_ref(), &bytes[..]);
    let origin_gets = b.origin.gets("twice/data.parquet");
    assert!(origin_gets >= 1, "the miss read the origin");

    let second = get("twice/data.parquet", &[]).await;
    assert_eq!(second.status(), 200);
    assert_eq!(header(&second, "x-floe-cache"), "hit");
    assert_eq!(second.bytes().await.unwrap().as_ref(), &bytes[..]);
    assert_eq!(
        b.origin.gets("twice/data.parquet"),
        origin_gets,
        "a hit reads no origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_read_answers_exactly_its_bytes() {
    let b = bench();
    let bytes = object(2, 100_000);
    b.origin.put_file("range/data.parquet", &bytes);

    let r = get("range/data.parquet", &[("range", "bytes=1000-1999")]).await;
    assert_eq!(r.status(), 206);
    assert_eq!(header(&r, "content-range"), "bytes 1000-1999/100000");
    assert_eq!(r.bytes().await.unwrap().as_ref(), &bytes[1000..2000]);
    // A fill asks the origin for what the read needs, never the whole object.
    let seen = b.origin.seen("range/data.parquet");
    let reads: Vec<_> = seen.iter().filter(|s| s.method == "GET").collect();
    assert!(!reads.is_empty());
    assert!(reads.iter().all(|s| s.range.is_some()), "{reads:?}");

    let suffix = get("range/data.parquet", &[("range", "bytes=-10")]).await;
    assert_eq!(suffix.status(), 206);
    assert_eq!(suffix.bytes().await.unwrap().as_ref(), &bytes[99_990..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_through_floe_is_what_the_next_read_sees() {
    let b = bench();
    let url = format!("{}/put/obj.bin", b.cached);
    let client = reqwest::Client::new();
    let put = |body: Vec<u8>| {
        let len = body.len().to_string();
        signed(
            &client,
            "PUT",
            &url,
            &[("content-length", &len)],
            body,
            CLIENT_SECRET,
        )
        .send()
    };
    let old = object(3, 50_000);
    assert_eq!(put(old.clone()).await.unwrap().status(), 200);
    let r = get("put/obj.bin", &[]).await;
    assert_eq!(r.bytes().await.unwrap().as_ref(), &old[..]);
    let cached = get("put/obj.bin", &[]).await;
    assert_eq!(header(&cached, "x-floe-cache"), "hit");
    drop(cached.bytes().await.unwrap());

    let new = object(4, 60_000);
    assert_eq!(put(new.clone()).await.unwrap().status(), 200);
    let after = get("put/obj.bin", &[]).await;
    assert_eq!(after.status(), 200);
    assert_eq!(
        after.bytes().await.unwrap().as_ref(),
        &new[..],
        "never the replaced bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_no_such_key() {
    let r = get("missing/nothing.parquet", &[]).await;
    assert_eq!(r.status(), 404);
    let body = r.text().await.unwrap();
    assert!(body.contains("<Code>NoSuchKey</Code>"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_signature_is_refused_before_the_origin() {
    let b = bench();
    b.origin.put_file("auth/secret.parquet", &object(5, 1000));
    let url = format!("{}/auth/secret.parquet", b.cached);
    let client = reqwest::Client::new();
    let r = signed(&client, "GET", &url, &[], Vec::new(), "not-the-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("<Code>SignatureDoesNotMatch</Code>"),
        "{body}"
    );

    let unsigned = client.get(&url).send().await.unwrap();
    assert_eq!(unsigned.status(), 403);
    assert!(unsigned
        .text()
        .await
        .unwrap()
        .contains("<Code>AccessDenied</Code>"));
    assert!(
        b.origin.seen("auth/secret.parquet").is_empty(),
        "nothing reached the origin"
    );
}
