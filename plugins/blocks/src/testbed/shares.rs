//! Per-route quotas (see [`crate::shares`]): a route with a share fills its own data store, so
//! its scan past the share evicts its own blocks only, and another route's hot set stays in
//! DRAM; without the share the same scan evicts it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::origin::MemOrigin;
use super::{pattern, settings, Bed, BS};
use crate::filter::BlockFilter;
use crate::shares::ShareSettings;
use crate::store::{StoreSettings, REGION_BYTES};

const B: usize = BS as usize;
const TENANT: &str = "tenant";
const SHARE_DRAM: usize = 16 * B; // 1 MiB

/// A bed whose data store is 4 MiB of DRAM, a quarter of it the tenant's share when `share`.
async fn bed(share: bool) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), 4 << 20);
    if share {
        s.data.dram_bytes -= SHARE_DRAM;
        s.shares = vec![ShareSettings {
            bucket: TENANT.to_owned(),
            store: StoreSettings {
                dram_bytes: SHARE_DRAM,
                disk_bytes: 4 * REGION_BYTES,
                disk_dir: dir.path().join("shares").join(TENANT),
                write_every_insert: false,
            },
        }];
    }
    Bed::with(dir, s, Arc::new(MemOrigin::default())).await
}

/// Reads the hot set (8 files of 2 blocks, twice: admitted), then the tenant's scan of 4x its
/// share (twice), then the hot set again; returns the hot set's second reading's (origin GETs,
/// bytes served from disk): both 0 when every block was still in DRAM.
async fn scan_beside_a_hot_set(bed: &Bed) -> (u64, u64) {
    let tenant = BlockFilter::new(bed.cache.clone(), bed.origin.clone(), TENANT);
    for i in 0..8u8 {
        bed.origin.put(&format!("data/hot-{i}"), pattern(i, 2 * B));
    }
    for _ in 0..2 {
        for i in 0..8u8 {
            bed.get(&format!("data/hot-{i}"), None).await.unwrap();
        }
    }
    for i in 0..16u8 {
        bed.origin
            .put(&format!("data/scan-{i}"), pattern(100 + i, 4 * B));
    }
    for _ in 0..2 {
        for i in 0..16u8 {
            let read = bed
                .get_via(&tenant, &format!("data/scan-{i}"))
                .await
                .unwrap();
            assert_eq!(read.bytes(), &pattern(100 + i, 4 * B));
        }
    }
    bed.cache.settle().await;
    let disk_before = bed
        .cache
        .data_stats
        .disk_served_bytes
        .load(Ordering::Relaxed);
    let gets_before = bed.origin.counts().1;
    for i in 0..8u8 {
        let read = bed.get(&format!("data/hot-{i}"), None).await.unwrap();
        assert_eq!((read.label(), read.bytes()), ("hit", &pattern(i, 2 * B)));
    }
    let disk = bed
        .cache
        .data_stats
        .disk_served_bytes
        .load(Ordering::Relaxed)
        - disk_before;
    (bed.origin.counts().1 - gets_before, disk)
}

#[tokio::test]
async fn a_routes_scan_past_its_share_leaves_another_routes_hot_set_in_dram() {
    let shared = bed(true).await;
    assert_eq!(scan_beside_a_hot_set(&shared).await, (0, 0));
    let share = &shared.cache.shares[0];
    assert!(
        share.stats.events.evictions.load(Ordering::Relaxed) > 0,
        "the tenant's scan evicted from its own store"
    );
    assert!(share.store.memory().usage() <= SHARE_DRAM);
    assert_eq!(
        shared
            .cache
            .data_stats
            .events
            .evictions
            .load(Ordering::Relaxed),
        0,
        "nothing left the other routes' store"
    );
    let stats = crate::admin::stats(&shared.cache);
    assert!(stats.shares[TENANT].inserted > 0 && stats.shares[TENANT].misses > 0);

    // The same scan without the share: the hot set leaves DRAM.
    let unshared = bed(false).await;
    let (gets, disk) = scan_beside_a_hot_set(&unshared).await;
    assert!(gets + disk > 0, "the scan should have evicted the hot set");
}
