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
        parts: Default::default(),
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

#[tokio::test(start_paused = true)]
async fn a_file_pinned_in_part_keeps_the_blocks_of_its_ranges_only() {
    use std::sync::atomic::Ordering;
    let bed = Bed::new().await;
    let key = "data/wide.parquet";
    let file = pattern(7, 4 * B + 100);
    bed.origin.put(key, file.clone());
    // One column chunk across blocks 1 and 2.
    let mut pin = body(&[(key, file.len())]);
    pin.parts
        .insert(key.to_owned(), vec![B as u64 + 10, B as u64]);
    let doc = bed.filter.keep(&pin).await.unwrap();
    assert_eq!(
        doc.owned_bytes,
        2 * B as u64,
        "only the two blocks it overlaps count"
    );
    assert_eq!(
        bed.filter.class_of(key).store,
        crate::classify::Store::KeptPart
    );
    assert_eq!(bed.get(key, None).await.unwrap().bytes(), &file);
    let kept_entries = bed.cache.kept.memory().entries();
    assert_eq!(
        kept_entries, 2,
        "blocks 1 and 2 are kept, the others are data"
    );
    // A flood evicts the data blocks; the pinned range reads with no origin request.
    for i in 0..64u8 {
        let flood = format!("data/flood-{i}.bin");
        bed.origin.put(&flood, pattern(i, 8 * B));
        for _ in 0..2 {
            bed.get(&flood, None).await.unwrap();
        }
    }
    assert!(
        bed.cache
            .data_stats
            .events
            .evictions
            .load(Ordering::Relaxed)
            > 0
    );
    let before = bed.origin.counts();
    let range = format!("bytes={}-{}", B + 10, 2 * B + 9);
    let again = bed.get(key, Some(&range)).await.unwrap();
    assert_eq!(again.bytes(), &file.slice(B + 10..2 * B + 10));
    assert_eq!(
        bed.origin.counts().1,
        before.1,
        "the pinned range went to the origin"
    );
    // Pinned whole now: the file's class changes and its blocks are kept whole after a read.
    bed.filter.keep(&body(&[(key, file.len())])).await.unwrap();
    assert_eq!(bed.filter.class_of(key).store, crate::classify::Store::Kept);
    // Then pinned in part again, differently (block 3 only): blocks 1 and 2 leave.
    let mut other = body(&[(key, file.len())]);
    other.parts.insert(key.to_owned(), vec![3 * B as u64, 10]);
    bed.filter.keep(&other).await.unwrap();
    assert_eq!(
        bed.cache.kept.memory().entries(),
        0,
        "no block of the old ranges is kept"
    );
    assert_eq!(bed.get(key, None).await.unwrap().bytes(), &file);
    assert_eq!(bed.cache.kept.memory().entries(), 1);
}

#[test]
fn ranges_map_to_the_blocks_they_overlap() {
    use crate::kept::blocks_of;
    assert_eq!(&*blocks_of(&[0, 1, 10, 5], 10, 100), &[0, 1]);
    assert_eq!(
        &*blocks_of(&[95, 50, 30, 0], 10, 100),
        &[9],
        "clamped; empty ranges skipped"
    );
    assert_eq!(
        &*blocks_of(&[200, 5, 1], 10, 100),
        &[] as &[u64],
        "past the end; odd tail"
    );
}

#[tokio::test(start_paused = true)]
async fn held_bytes_count_every_store_by_key() {
    let bed = Bed::new().await;
    let (pinned, plain) = (pattern(1, 2 * B + 5), pattern(2, 3 * B));
    bed.origin.put("data/p.parquet", pinned.clone());
    bed.origin.put("data/x.bin", plain.clone());
    bed.filter
        .keep(&body(&[("data/p.parquet", pinned.len())]))
        .await
        .unwrap();
    bed.get("data/p.parquet", None).await.unwrap();
    bed.get("data/x.bin", Some("bytes=0-99")).await.unwrap();
    let keys = ["data/p.parquet", "data/x.bin", "data/none"].map(String::from);
    let held = bed.filter.held(&keys).await;
    assert_eq!(
        held[0],
        pinned.len() as u64,
        "the kept store holds it whole"
    );
    assert!(
        held[1] >= 100 && held[1] <= B as u64,
        "a range fill: {}",
        held[1]
    );
    assert_eq!(held[2], 0);
}
