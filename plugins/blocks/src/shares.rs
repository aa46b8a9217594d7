//! Per-route quotas: a route listed in `cache.shares` gets a data store of its own, with DRAM
//! and disk ceilings carved out of the data store's, so its reads evict only its own blocks
//! and a tenant scanning past its share cannot cool another's hot set. The routes without a
//! share use the data store with what is left. Metadata (and Parquet footers) stay in the
//! shared metadata store: small, and what every planner needs first.
//!
//! A block's store is chosen by its bucket when the block's class is data
//! ([`crate::cache::BlockCache::pick`]): a scan of a short list, empty unless shares are set.

use std::path::Path;
use std::sync::Arc;

use floe_core::config::{ConfigCx, ConfigError};

use crate::cache::StoreStats;
use crate::config::CacheSection;
use crate::store::{BlockStore, StoreSettings, REGION_BYTES};

/// One route's share, validated.
#[derive(Debug, Clone)]
pub struct ShareSettings {
    /// The route's bucket.
    pub bucket: String,
    /// Its data store's ceilings and folder.
    pub store: StoreSettings,
}

/// One route's data store, open.
pub struct Share {
    /// The route's bucket.
    pub bucket: Arc<str>,
    /// Its data store.
    pub store: BlockStore,
    /// Its counters.
    pub stats: StoreStats,
}

/// Takes each share out of the data store's ceilings: the shared data store keeps the rest,
/// which must still hold a block of DRAM and four regions of disk. Shares' disk tiers live in
/// `<dir>/shares/<bucket>`.
pub fn carve(
    cx: &ConfigCx<'_>,
    c: &CacheSection,
    mut data: StoreSettings,
) -> Result<(StoreSettings, Vec<ShareSettings>), ConfigError> {
    let mut out: Vec<ShareSettings> = Vec::new();
    for (i, s) in c.shares.iter().enumerate() {
        let at = |field: &str| format!("cache.shares[{i}].{field}");
        if floe_core::BucketName::parse(&s.bucket).is_err() {
            return Err(cx.err(at("bucket"), format!("{:?} is not a bucket name", s.bucket)));
        }
        if out.iter().any(|o| o.bucket == s.bucket) {
            return Err(cx.err(at("bucket"), format!("{} has a share already", s.bucket)));
        }
        if s.dram_bytes < c.block_bytes as usize {
            return Err(cx.err(at("dram_bytes"), "must hold at least one block"));
        }
        if s.disk_bytes < 4 * REGION_BYTES {
            return Err(cx.err(
                at("disk_bytes"),
                format!("must be at least {} (four disk regions)", 4 * REGION_BYTES),
            ));
        }
        let left_dram = data.dram_bytes.checked_sub(s.dram_bytes);
        let left_disk = data.disk_bytes.checked_sub(s.disk_bytes);
        let (Some(left_dram), Some(left_disk)) = (left_dram, left_disk) else {
            return Err(cx.err(
                at("bucket"),
                "the shares take more than cache.data's ceilings",
            ));
        };
        if left_dram < c.block_bytes as usize || left_disk < 4 * REGION_BYTES {
            return Err(cx.err(
                at("bucket"),
                format!(
                    "the shares leave the other routes less than a block of DRAM or {} of disk \
                     in cache.data",
                    4 * REGION_BYTES
                ),
            ));
        }
        (data.dram_bytes, data.disk_bytes) = (left_dram, left_disk);
        out.push(ShareSettings {
            bucket: s.bucket.clone(),
            store: StoreSettings {
                dram_bytes: s.dram_bytes,
                disk_bytes: s.disk_bytes,
                disk_dir: Path::new(&c.dir).join("shares").join(&s.bucket),
                write_every_insert: data.write_every_insert,
            },
        });
    }
    Ok((data, out))
}

/// Opens each share's data store.
pub async fn open(
    shares: &[ShareSettings],
    block_bytes: usize,
) -> Result<Vec<Share>, crate::store::StoreError> {
    let mut out = Vec::new();
    for s in shares {
        let stats = StoreStats::default();
        let store = crate::store::open(
            "share",
            &s.store,
            block_bytes,
            stats.events.clone(),
            None,
            0,
        )
        .await?;
        out.push(Share {
            bucket: Arc::from(s.bucket.as_str()),
            store,
            stats,
        });
    }
    Ok(out)
}
