//! The filter's bookkeeping beside the read path: DeleteObjects bodies, catalog pins, and a
//! property test of ranged reads over any cached state.

use bytes::Bytes;
use floe_core::S3Op;
use floe_filter::RequestFilter;
use proptest::prelude::*;

use super::{ctx, pattern, Bed, BS};
use crate::classify::Store;
use crate::delete::DeleteBody;

const B: usize = BS as usize;

/// The keys of a DeleteObjects body are dropped (memory and persisted mapping) as the body
/// ends; keys it does not name keep theirs. The body is held back until it is read whole, then
/// goes on as sent. Backs test_delete_objects_through_floe_survives_restart.
#[tokio::test(start_paused = true)]
async fn delete_objects_drops_exactly_the_keys_in_its_body() {
    let bed = Bed::new().await;
    for k in ["data/a & b.bin", "data/kept.bin"] {
        bed.origin.put(k, pattern(1, B));
        assert!(bed.head(k).await.is_some());
    }
    let mut c = ctx(S3Op::DeleteObjects, "x");
    c.key = None;
    c.ext.insert(DeleteBody::default());
    let xml = "<Delete><Object><Key>data/a &amp; b.bin</Key></Object></Delete>";
    let (head, tail) = xml.split_at(20);
    let mut sent = Vec::new();
    for (piece, end) in [(head, false), (tail, true)] {
        let mut body = Some(Bytes::copy_from_slice(piece.as_bytes()));
        bed.filter
            .request_body_filter(&mut body, end, &mut c)
            .await
            .unwrap();
        let out = body.unwrap_or_default();
        assert!(
            end || out.is_empty(),
            "nothing goes on before the body is read"
        );
        sent.extend_from_slice(&out);
    }
    assert_eq!(sent, xml.as_bytes(), "the body goes on as sent");
    assert!(bed.filter.map.get("data/a & b.bin").is_none());
    assert!(bed.filter.map.get("data/kept.bin").is_some());
    let class = bed.filter.class_of("data/a & b.bin");
    let persisted = bed
        .cache
        .load_mapping(&bed.filter.bucket_key, &"data/a & b.bin".into(), class)
        .await;
    assert!(
        persisted.is_none(),
        "the persisted mapping outlived the delete"
    );
}

/// A DeleteObjects body Floe cannot read is refused, and none of it went on: the origin
/// never deletes keys whose mappings Floe would keep.
#[tokio::test(start_paused = true)]
async fn an_unreadable_delete_objects_body_never_goes_on() {
    let bed = Bed::new().await;
    let bodies = [
        "<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
        "text<Delete><Object><Key>a</Key></Object></Delete>",
    ];
    for xml in bodies {
        let mut c = ctx(S3Op::DeleteObjects, "x");
        c.key = None;
        c.ext.insert(DeleteBody::default());
        let mut body = Some(Bytes::copy_from_slice(xml.as_bytes()));
        let err = bed
            .filter
            .request_body_filter(&mut body, true, &mut c)
            .await
            .unwrap_err();
        assert_eq!(err.code, floe_core::S3ErrorCode::MalformedXML, "{xml}");
        assert!(body.unwrap_or_default().is_empty(), "{xml}: bytes went on");
    }
}

/// Pins are bounded: the least recently used go first, and an unpinned key falls back to the
/// path rules.
#[tokio::test]
async fn catalog_pins_are_bounded_least_recently_used_first() {
    let mut bed = Bed::new().await;
    bed.filter.max_pins = 4;
    let keys: Vec<String> = (0..10).map(|i| format!("odd/{i}.bin")).collect();
    for k in &keys {
        bed.filter.pin(std::slice::from_ref(k), Store::Metadata);
        // odd/0.bin is read between pins: it stays.
        assert_eq!(bed.filter.class_of("odd/0.bin").store, Store::Metadata);
    }
    assert_eq!(bed.filter.pinned.lock().unwrap().len(), 4);
    assert_eq!(bed.filter.class_of("odd/9.bin").store, Store::Metadata);
    let fallback = bed.filter.class_of("odd/1.bin");
    assert_eq!((fallback.store, fallback.immutable), (Store::Data, false));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of ranged reads of one object, over whatever earlier reads left cached,
    /// reads exactly the object's bytes, and a repeat of the last read costs no origin GET.
    #[test]
    fn any_reads_over_any_cached_state_return_the_right_bytes(
        reads in proptest::collection::vec((0usize..5 * B, 1usize..3 * B), 1..6),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let bed = Bed::new().await;
            let body = pattern(42, 5 * B + 123);
            bed.origin.put("data/p.bin", body.clone());
            let mut last = String::new();
            for (first, len) in reads {
                let end = (first + len).min(body.len()) - 1;
                last = format!("bytes={first}-{end}");
                let r = bed.get("data/p.bin", Some(&last)).await.unwrap();
                prop_assert!(r.bytes() == &body.slice(first..=end), "read {}", last);
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let gets = bed.origin.counts().1;
            let again = bed.get("data/p.bin", Some(&last)).await.unwrap();
            prop_assert_eq!((again.label(), bed.origin.counts().1), ("hit", gets));
            Ok(())
        })?;
    }
}

/// Owners of pairs of blocks (0-1, 2-3, ...): a run never crosses a pair boundary.
struct Pairs;

impl crate::RunSplit for Pairs {
    fn together(&self, _t: &crate::Target, prev: u64, next: u64) -> bool {
        prev / 2 == next / 2
    }
}

/// The placement seam: a run of adjacent missing blocks is split where the placement says, so
/// a fleet can keep each owner's blocks in that owner's fills.
#[tokio::test(start_paused = true)]
async fn runs_split_where_the_placement_says() {
    let dir = tempfile::tempdir().unwrap();
    let s = super::settings(dir.path(), 8 << 20);
    let origin = std::sync::Arc::new(super::origin::MemOrigin::default());
    let bed = Bed::placed(dir, s, origin, std::sync::Arc::new(Pairs)).await;
    let body = pattern(3, 4 * B);
    bed.origin.put("data/pairs.bin", body.clone());
    bed.head("data/pairs.bin").await.unwrap();
    let r = bed
        .get("data/pairs.bin", Some("bytes=0-262143"))
        .await
        .unwrap();
    assert!(r.bytes() == &body);
    assert_eq!(
        bed.origin.counts().1,
        2,
        "blocks 0-1 and 2-3 in one GET each"
    );
}

/// A write staged on this node (write-back's, `local_head`) is the key's version here, over a
/// mapping persisted before it, and is never persisted itself: it is not at the origin yet,
/// and a persisted copy would outlive a write that overtakes it while this node is away (the
/// chaos test saw a restarted node answer a deleted key from such a copy).
#[tokio::test(start_paused = true)]
async fn a_staged_write_wins_over_the_persisted_mapping_and_is_never_persisted() {
    let bed = Bed::new().await;
    let key = "meta/staged.json";
    let at_origin = bed.origin.put(key, pattern(3, 100));
    assert_eq!(bed.head(key).await.as_deref(), Some(at_origin.as_str()));
    let class = bed.filter.class_of(key);
    let persisted = |bed: &Bed| {
        let cache = bed.cache.clone();
        let bucket = bed.filter.bucket_key.clone();
        async move { cache.load_mapping(&bucket, &key.into(), class).await }
    };
    assert!(
        persisted(&bed).await.is_some(),
        "the origin's version is persisted"
    );
    // Restarted with a write staged meanwhile: it is the version, not the persisted one.
    let settings = bed.cache.settings.clone();
    let (dir, origin) = bed.close().await;
    let staged = origin.stage(key, b"staged bytes");
    let again = Bed::with(dir, settings, origin).await;
    assert_eq!(again.head(key).await.as_deref(), Some(staged.as_str()));
    again.cache.settle().await;
    let kept = persisted(&again).await.map(|m| m.etag.as_str().to_owned());
    assert_eq!(
        kept.as_deref(),
        Some(at_origin.as_str()),
        "the staged version was persisted over the origin's"
    );
}
