//! How many bytes of given objects this node holds (`POST /held?bucket=`, body
//! [`floe_core::wire::HeldBody`]). DRAM: one pass over every store's DRAM entries, each block
//! of an asked key counted by the bytes it holds (an owner filled by its peers holds blocks of
//! versions it never resolved itself, so blocks are found by key, not through mappings).
//! Disk: for a key this node has a mapping of, each block absent from DRAM counts whole when
//! the disk tier has its first page (foyer's filter: an estimate). The console sums it per
//! table and node, every twenty seconds.

use std::collections::HashMap;
use std::sync::Arc;

use crate::filter::BlockFilter;
use crate::range::block_span;

/// Most keys one request may ask about (bounded work per admin call).
pub const MAX_HELD_KEYS: usize = 10_000;

impl BlockFilter {
    /// Bytes held of each of `keys`, in order.
    pub async fn held(&self, keys: &[String]) -> Vec<u64> {
        let wanted: HashMap<&str, usize> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let mut out = vec![0u64; keys.len()];
        let stores = self
            .cache
            .disk_stores()
            .map(|(store, _)| store)
            .chain([&self.cache.kept]);
        for store in stores {
            store
                .flush_if(|k, v| {
                    if *k.bucket == *self.bucket_key && !k.is_record() {
                        if let Some(i) = wanted.get(&*k.key) {
                            out[*i] += v.held() as u64;
                        }
                    }
                    false // nothing is written: this only reads
                })
                .await;
        }
        for (i, key) in keys.iter().enumerate() {
            out[i] += self.on_disk_only(key);
        }
        out
    }

    /// Bytes of `key`'s mapped version whose blocks are on disk and not in DRAM.
    fn on_disk_only(&self, key: &str) -> u64 {
        let Some(m) = self.map.get(key) else {
            return 0;
        };
        let object_key: Arc<str> = Arc::from(key);
        let bs = self.cache.settings.block_bytes;
        self.cache
            .blocks_of_version(&self.bucket_key, &object_key, &m)
            .filter(|(k, store)| {
                self.cache.held(k, *store).is_none() && self.cache.contains(k, *store)
            })
            .map(|(k, _)| block_span(k.index, bs, m.size).1)
            .sum()
    }
}
