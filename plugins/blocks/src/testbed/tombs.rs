//! The tombstone horizon (see [`crate::tombs`]): a persisted mapping is trusted after a
//! restart only while the removals logged since it was written fit in half of foyer's ring;
//! past that the key resolves again. The removal count survives restarts.

use super::{pattern, Bed, BS};
use crate::store::BlockKey;

const B: usize = BS as usize;

/// `n` removals logged in the metadata tier (each a tombstone).
fn removals(bed: &Bed, n: u64) {
    for i in 0..n {
        let key = BlockKey {
            bucket: "elsewhere".into(),
            key: format!("gone-{i}").into(),
            etag: "".into(),
            block_bytes: 0,
            index: u64::MAX,
        };
        bed.cache.meta.storage().delete(&key);
    }
}

#[tokio::test]
async fn a_mapping_older_than_half_the_tombstone_ring_resolves_again_after_a_restart() {
    let bed = Bed::new().await;
    let horizon = bed.cache.tombs.horizon();
    assert_eq!(
        horizon,
        (64 << 20) / 4096 / 2,
        "half of a 64 MiB tier's slots"
    );
    let body = pattern(3, 2 * B);
    bed.origin.put("meta/a.json", body.clone());
    bed.origin.put("meta/b.json", body.clone());
    bed.get("meta/a.json", None).await.unwrap();
    removals(&bed, horizon - 100);
    bed.get("meta/b.json", None).await.unwrap(); // written after most of the removals
    removals(&bed, 200); // a.json's record is now past the horizon, b.json's is not
    let settings = bed.cache.settings.clone();
    let clock = bed.cache.tombs.now();
    assert!(clock >= horizon + 100, "{clock}");
    let (dir, origin) = bed.close().await;
    let again = Bed::with(dir, settings, origin).await;
    assert!(
        again.cache.tombs.now() >= clock,
        "the count goes on across a restart"
    );
    let heads = again.origin.counts().0 + again.origin.counts().1;
    let b = again.get("meta/b.json", None).await.unwrap();
    assert_eq!((b.label(), b.bytes()), ("hit", &body));
    assert_eq!(
        again.origin.counts().0 + again.origin.counts().1,
        heads,
        "b.json trusted"
    );
    let a = again.get("meta/a.json", None).await.unwrap();
    assert_eq!(a.bytes(), &body);
    assert!(
        again.origin.counts().0 + again.origin.counts().1 > heads,
        "a.json's record is past the horizon: the origin is asked again"
    );
}

#[test]
fn a_record_without_a_stamp_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = crate::tombs::TombClock::open(&dir.path().join("metadata"), 64 << 20);
    assert!(clock.covers(Some(clock.now())));
    assert!(!clock.covers(None));
    assert!(!clock.covers(Some(0)) || clock.now() < clock.horizon());
}
