//! Pinned files (see [`crate::kept`]): kept whole in the kept store, where a flood of other
//! reads cannot evict them; a set past `cache.pinned_bytes` is refused whole; unpinned files
//! leave the kept store.

use floe_core::wire::KeptBody;

use super::{pattern, Bed, BS};
use crate::kept::KeptError;

const B: usize = BS as usize;

fn body(files: &[(&str, usize)]) -> KeptBody {
    KeptBody {
        keys: files
            .iter()
            .map(|(k, s)| (k.to_string(), *s as u64))
            .collect(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_pinned_file_survives_a_flood_and_leaves_when_unpinned() {
    let bed = Bed::new().await;
    let pinned = pattern(40, 3 * B + 17);
    bed.origin.put("data/pinned.parquet", pinned.clone());
    let doc = bed
        .filter
        .keep(&body(&[("data/pinned.parquet", pinned.len())]))
        .await
        .unwrap();
    assert_eq!((doc.keys, doc.owned_bytes), (1, pinned.len() as u64));
    assert_eq!(
        bed.get("data/pinned.parquet", None).await.unwrap().bytes(),
        &pinned
    );
    assert!(
        bed.cache.kept.memory().usage() >= pinned.len(),
        "kept whole"
    );
    // A flood four times the data store's DRAM (8 MiB), read twice (admitted).
    for i in 0..64u8 {
        let key = format!("data/flood-{i}.bin");
        bed.origin.put(&key, pattern(i, 8 * B));
        for _ in 0..2 {
            bed.get(&key, None).await.unwrap();
        }
    }
    assert!(
        bed.cache
            .data_stats
            .events
            .evictions
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    let before = bed.origin.counts();
    let again = bed.get("data/pinned.parquet", None).await.unwrap();
    assert_eq!((again.label(), again.bytes()), ("hit", &pinned));
    assert_eq!(
        bed.origin.counts(),
        before,
        "the pinned file read again from the origin"
    );
    // Unpinned: its kept blocks go, and it reads as any data file again.
    bed.filter.keep(&body(&[])).await.unwrap();
    assert_eq!(bed.cache.kept.memory().usage(), 0);
    assert_eq!(
        bed.get("data/pinned.parquet", None).await.unwrap().bytes(),
        &pinned
    );
    assert_eq!(
        bed.cache.kept.memory().usage(),
        0,
        "read into the kept store after unpinning"
    );
}

#[tokio::test(start_paused = true)]
async fn a_set_past_the_bound_is_refused_whole() {
    let bed = Bed::new().await;
    let bound = bed.cache.settings.kept_bytes;
    let fits = body(&[("data/a.parquet", bound / 2)]);
    bed.filter.keep(&fits).await.unwrap();
    let over = body(&[
        ("data/a.parquet", bound / 2),
        ("data/b.parquet", bound / 2 + 1),
    ]);
    let refused = bed.filter.keep(&over).await.unwrap_err();
    assert!(matches!(refused, KeptError::OverBound { .. }), "{refused}");
    assert!(
        refused.to_string().contains("cache.pinned_bytes"),
        "{refused}"
    );
    let doc = bed.filter.kept_doc();
    assert_eq!(
        (doc.keys, doc.pinned_bytes),
        (1, bound as u64 / 2),
        "the earlier set stays whole"
    );
    assert!(bed.filter.class_of("data/b.parquet").store != crate::classify::Store::Kept);
}
