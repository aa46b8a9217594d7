//! Conditional reads served from the cache: evaluated against the held version (no origin
//! request when it is fresh), a 412 never answered from a mapping the origin has moved past.

use floe_core::S3ErrorCode;
use floe_core::S3Op::{GetObject as GET, HeadObject as HEAD};

use super::origin::last_modified;
use super::{pattern, Bed, Read, BS};

const B: usize = BS as usize;

/// A request's conditional headers.
type Headers<'a> = Vec<(&'a str, &'a str)>;

/// An HTTP date `secs` seconds after version `n` was written.
fn date(n: u64, secs: i64) -> String {
    let t = last_modified(n);
    let t = match secs >= 0 {
        true => t + std::time::Duration::from_secs(secs as u64),
        false => t - std::time::Duration::from_secs(secs.unsigned_abs()),
    };
    httpdate::fmt_http_date(t)
}

/// What a conditional read answered: its status and bytes, or the error's code.
fn outcome(r: Result<Read, floe_core::S3Error>) -> (u16, usize) {
    match r {
        Ok(read) => (read.status(), read.bytes().len()),
        Err(e) => (e.status(), 0),
    }
}

#[tokio::test(start_paused = true)]
async fn every_condition_on_a_held_version_is_answered_without_the_origin() {
    let bed = Bed::new().await;
    let body = pattern(1, 2 * B + 100);
    let etag = bed.origin.put("data/a.parquet", body.clone());
    let tag = etag.as_str();
    assert_eq!(
        bed.get("data/a.parquet", None).await.unwrap().bytes(),
        &body
    );
    let before = bed.origin.counts();
    let (older, same, newer) = (date(1, -1), date(1, 0), date(1, 1));
    let whole = body.len();
    let cases: Vec<(Headers, (u16, usize))> = vec![
        (vec![("if-match", tag)], (200, whole)),
        (vec![("if-match", "*")], (200, whole)),
        (vec![("if-match", "\"other\"")], (412, 0)),
        (vec![("if-none-match", tag)], (304, 0)),
        (vec![("if-none-match", "*")], (304, 0)),
        (vec![("if-none-match", "\"other\"")], (200, whole)),
        (vec![("if-modified-since", &same)], (304, 0)),
        (vec![("if-modified-since", &older)], (200, whole)),
        (vec![("if-unmodified-since", &same)], (200, whole)),
        (vec![("if-unmodified-since", &older)], (412, 0)),
        // S3's two documented combinations.
        (
            vec![("if-match", tag), ("if-unmodified-since", &older)],
            (200, whole),
        ),
        (
            vec![("if-none-match", tag), ("if-modified-since", &older)],
            (304, 0),
        ),
        (
            vec![
                ("if-none-match", "\"other\""),
                ("if-modified-since", &newer),
            ],
            (304, 0),
        ),
    ];
    for (headers, want) in &cases {
        let got = outcome(bed.get_if(GET, "data/a.parquet", None, headers).await);
        assert_eq!(&got, want, "GET {headers:?}");
        let head = outcome(bed.get_if(HEAD, "data/a.parquet", None, headers).await);
        assert_eq!(head, (want.0, 0), "HEAD {headers:?}");
    }
    // A conditional range is a 206 of exactly the range.
    let r = bed
        .get_if(
            GET,
            "data/a.parquet",
            Some("bytes=10-19"),
            &[("if-match", tag)],
        )
        .await
        .unwrap();
    assert_eq!(
        (r.status(), r.bytes(), r.label()),
        (206, &body.slice(10..20), "hit")
    );
    // The "other" If-Match asked the origin once per read (it may have had a newer version),
    // and nothing else reached it.
    let (heads, gets, bytes) = bed.origin.counts();
    assert_eq!((gets, bytes), (before.1, before.2));
    assert_eq!(
        heads - before.0,
        2,
        "one check per If-Match naming another version"
    );
}

#[tokio::test(start_paused = true)]
async fn an_if_match_naming_a_newer_version_at_the_origin_serves_that_version() {
    let bed = Bed::new().await;
    let v1 = pattern(2, B);
    bed.origin.put("data/b.parquet", v1.clone());
    assert_eq!(bed.get("data/b.parquet", None).await.unwrap().bytes(), &v1);
    // Rewritten behind the cache (an immutable-class key is never revalidated on its own).
    let v2 = pattern(3, B + 7);
    let etag2 = bed.origin.put("data/b.parquet", v2.clone());
    let r = bed
        .get_if(GET, "data/b.parquet", None, &[("if-match", etag2.as_str())])
        .await
        .unwrap();
    assert_eq!(
        (r.status(), r.bytes()),
        (200, &v2),
        "never 412 from the old mapping"
    );
    // The mapping moved on: a plain read serves v2 too, with no new resolve.
    let heads = bed.origin.counts().0;
    assert_eq!(bed.get("data/b.parquet", None).await.unwrap().bytes(), &v2);
    assert_eq!(bed.origin.counts().0, heads);
    // An If-Match of the old version now fails: the origin has moved past it.
    let v1_tag = "\"v1\"";
    let e = bed
        .get_if(GET, "data/b.parquet", None, &[("if-match", v1_tag)])
        .await
        .unwrap_err();
    assert_eq!(e.code, S3ErrorCode::PreconditionFailed);
    assert!(e
        .headers
        .iter()
        .any(|(k, v)| *k == "etag" && v == etag2.as_str()));
}

/// ClickHouse's pattern: a HEAD, then every ranged GET with If-Match of the HEAD's ETag; the
/// labels of the ranged reads, each checked against `body`.
async fn engine_query(bed: &Bed, key: &str, body: &bytes::Bytes, etag: &str) -> Vec<&'static str> {
    assert_eq!(bed.head(key).await.unwrap(), etag);
    let mut labels = Vec::new();
    for (first, last) in [
        (100, 4095),
        (70_000, 140_000),
        (body.len() - 8, body.len() - 1),
    ] {
        let range = format!("bytes={first}-{last}");
        let read = bed
            .get_if(GET, key, Some(&range), &[("if-match", etag)])
            .await
            .unwrap();
        assert_eq!(read.status(), 206);
        assert_eq!(read.bytes(), &body.slice(first..=last), "{range}");
        labels.push(read.label());
    }
    labels
}

#[tokio::test(start_paused = true)]
async fn an_engines_head_then_if_match_ranges_are_cached_reads() {
    let bed = Bed::new().await;
    let body = pattern(4, 3 * B);
    let etag = bed.origin.put("data/c.parquet", body.clone());
    let cold = engine_query(&bed, "data/c.parquet", &body, etag.as_str()).await;
    assert!(cold.iter().all(|l| *l == "miss"), "{cold:?}");
    let after_cold = bed.origin.counts();
    let warm = engine_query(&bed, "data/c.parquet", &body, etag.as_str()).await;
    assert_eq!(warm, vec!["hit"; 3]);
    assert_eq!(
        bed.origin.counts(),
        after_cold,
        "the warm pass asks the origin nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cold_read_that_may_be_answered_304_resolves_without_fetching_the_body() {
    let bed = Bed::new().await;
    let etag = bed.origin.put("data/d.parquet", pattern(5, 2 * B));
    let r = bed
        .get_if(
            GET,
            "data/d.parquet",
            None,
            &[("if-none-match", etag.as_str())],
        )
        .await
        .unwrap();
    assert_eq!((r.status(), r.bytes().len(), r.label()), (304, 0, "miss"));
    assert_eq!(bed.origin.counts(), (1, 0, 0), "one HEAD, no GET, no body");
    // Cold with a failing If-Unmodified-Since: 412 from the origin's current version.
    bed.origin.put("e.bin", pattern(6, 10));
    let e = bed
        .get_if(GET, "e.bin", None, &[("if-unmodified-since", &date(2, -5))])
        .await
        .unwrap_err();
    assert_eq!(e.status(), 412);
}
