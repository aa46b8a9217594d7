//! The blocks this node served most recently, for warmth hand-over in a fleet: when ownership
//! moves (a node joins, or this one drains), the new owners ask for the hot blocks they now own
//! and pull them, most recent first, instead of waiting for clients to miss them.
//!
//! Sharded LRU of block keys (Arc clones of the key's parts; once full, an insert reuses the
//! evicted entry), touched once per block a read serves.

use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use lru::LruCache;

use crate::store::BlockKey;

const SHARDS: usize = 16;
/// Blocks remembered (per node): 64 Ki entries, ~10 MiB of keys, 128 GiB of 2 MiB blocks.
pub const HOT_BLOCKS: usize = 1 << 16;

/// Recently served blocks and their objects' sizes.
pub struct HotList {
    shards: Vec<Mutex<LruCache<BlockKey, u64>>>,
    hasher: RandomState,
}

impl Default for HotList {
    fn default() -> Self {
        Self::with_capacity(HOT_BLOCKS)
    }
}

impl HotList {
    /// A list of about `n` blocks.
    pub fn with_capacity(n: usize) -> Self {
        let per =
            std::num::NonZeroUsize::new((n / SHARDS).max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(per)))
                .collect(),
            hasher: RandomState::new(),
        }
    }

    /// Records that block `key` of an object of `size` bytes was served.
    pub fn touch(&self, key: &BlockKey, size: u64) {
        let shard = &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS];
        if let Ok(mut s) = shard.lock() {
            if s.get_mut(key).is_none() {
                s.put(key.clone(), size);
            }
        }
    }

    /// Up to `limit` blocks of `bucket` that `wanted` accepts, most recently served first
    /// within each shard, shards interleaved.
    pub fn collect(
        &self,
        bucket: &str,
        limit: usize,
        wanted: impl Fn(&BlockKey) -> bool,
    ) -> Vec<(BlockKey, u64)> {
        let mut per: Vec<Vec<(BlockKey, u64)>> = self
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .map(|s| {
                        s.iter()
                            .filter(|(k, _)| &*k.bucket == bucket && wanted(k))
                            .map(|(k, n)| (k.clone(), *n))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        let mut out = Vec::new();
        let mut i = 0;
        while out.len() < limit && per.iter().any(|v| i < v.len()) {
            for v in &mut per {
                if let Some(e) = v.get(i) {
                    out.push(e.clone());
                }
            }
            i += 1;
        }
        out.truncate(limit);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(i: u64) -> BlockKey {
        BlockKey {
            bucket: Arc::from("b"),
            key: Arc::from("k"),
            etag: Arc::from("\"e\""),
            block_bytes: 1 << 20,
            index: i,
        }
    }

    #[test]
    fn it_keeps_the_most_recent_blocks_and_filters_them() {
        let h = HotList::with_capacity(SHARDS * 4);
        for i in 0..1000 {
            h.touch(&key(i), 10);
        }
        let all = h.collect("b", usize::MAX, |_| true);
        assert!(all.len() <= SHARDS * 4 && !all.is_empty());
        assert!(all.iter().all(|(k, _)| k.index >= 600));
        let even = h.collect("b", 5, |k| k.index % 2 == 0);
        assert!(even.len() <= 5 && even.iter().all(|(k, _)| k.index % 2 == 0));
        assert!(h.collect("other", 10, |_| true).is_empty());
    }
}
