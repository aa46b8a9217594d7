//! Pinned tables' files, kept against eviction: the control plane sends each route the files
//! of its pinned tables (`PUT /kept`, [`floe_core::wire::KeptBody`]); their class becomes
//! [`Store::Kept`], so their blocks (footers too) go to the kept store, DRAM that the data
//! and metadata stores' reads never evict from. Each node keeps the blocks it owns (every
//! block, on one node alone); what every route's pins need here is bounded by
//! `cache.pinned_bytes`, and a set past it is refused whole, never kept in part.
//!
//! A file leaving the set (unpinned, or replaced by a compaction) has its kept blocks removed
//! and goes back to the rules' class; a file joining it is resolved again under its new class.
//! The control plane warms what the node does not hold yet (and again after a restart: the
//! kept store is DRAM only, and the control plane sends the set every poll).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use floe_core::wire::{KeptBody, KeptDoc};
use floe_core::ObjectKey;

use crate::classify::{Class, Store};
use crate::filter::BlockFilter;

/// One route's pinned files: key -> size.
#[derive(Default)]
pub struct KeptSet {
    files: RwLock<HashMap<String, u64>>,
    owned_bytes: std::sync::atomic::AtomicU64,
}

/// Files pinned in part (some columns): the indices of the blocks kept, by bucket and key,
/// sorted. Read by [`crate::cache::BlockCache::store_of`] for files of class
/// [`Store::KeptPart`] only; written when a route's set is replaced.
#[derive(Default)]
pub struct KeptParts {
    by_bucket: RwLock<HashMap<Arc<str>, PartsOf>>,
}

/// One bucket's files pinned in part: key -> kept block indices, sorted.
type PartsOf = HashMap<String, Arc<[u64]>>;

impl KeptParts {
    /// Whether block `index` of `bucket`/`key` is kept.
    pub fn keeps(&self, bucket: &str, key: &str, index: u64) -> bool {
        self.get(bucket, key)
            .is_some_and(|blocks| blocks.binary_search(&index).is_ok())
    }

    /// The kept blocks of a file pinned in part.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Arc<[u64]>> {
        let by_bucket = self.by_bucket.read().ok()?;
        by_bucket.get(bucket)?.get(key).cloned()
    }

    /// Replaces `bucket`'s files pinned in part; returns the ones it had.
    fn replace(&self, bucket: &Arc<str>, parts: PartsOf) -> PartsOf {
        match self.by_bucket.write() {
            Ok(mut b) => b.insert(bucket.clone(), parts).unwrap_or_default(),
            Err(_) => HashMap::new(),
        }
    }
}

/// The blocks (of `block_bytes`) that flat `[start, len, ...]` ranges of a `size`-byte file
/// overlap, sorted and once each.
pub fn blocks_of(ranges: &[u64], block_bytes: u64, size: u64) -> Arc<[u64]> {
    let mut out: Vec<u64> = ranges
        .chunks_exact(2)
        .filter(|r| r[1] > 0 && r[0] < size)
        .flat_map(|r| {
            let end = r[0].saturating_add(r[1]).min(size);
            r[0] / block_bytes..=(end - 1) / block_bytes
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out.into()
}

/// Every route's pinned bytes on this node, against the bound.
#[derive(Default)]
pub struct KeptLedger {
    by_route: Mutex<HashMap<Arc<str>, u64>>,
}

/// Why a set was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeptError {
    /// Past `cache.pinned_bytes` (0: pins are off on this node).
    #[error("pinning {wanted} bytes on this node (with {others} pinned by other routes) is over cache.pinned_bytes ({bound})")]
    OverBound {
        /// What this route's set needs here.
        wanted: u64,
        /// What other routes' sets need here.
        others: u64,
        /// The bound.
        bound: u64,
    },
}

impl KeptSet {
    /// Whether `key` is pinned.
    pub fn contains(&self, key: &str) -> bool {
        self.files.read().is_ok_and(|f| f.contains_key(key))
    }

    /// The class of a pinned file (pinned in part: [`Store::KeptPart`]).
    pub fn class(key: &str, in_part: bool) -> Class {
        Class {
            store: if in_part {
                Store::KeptPart
            } else {
                Store::Kept
            },
            immutable: true,
            parquet: key.ends_with(".parquet"),
        }
    }
}

impl BlockFilter {
    /// Bytes of the kept blocks of `key` (`size` bytes; `part`: only these blocks) this node
    /// owns.
    fn owned_of(&self, key: &str, size: u64, part: Option<&Arc<[u64]>>) -> u64 {
        let Ok(object_key) = ObjectKey::parse(key) else {
            return 0;
        };
        let bs = self.cache.settings.block_bytes;
        // The rendezvous owner, donors or not: a hand-over's donor holds a block for a while,
        // the owner keeps it.
        (0..size.div_ceil(bs))
            .filter(|i| part.is_none_or(|blocks| blocks.binary_search(i).is_ok()))
            .filter(|i| {
                self.fleet
                    .as_ref()
                    .is_none_or(|f| f.owner(&self.bucket_key, object_key.as_str(), *i).is_none())
            })
            .map(|i| (size - i * bs).min(bs))
            .sum()
    }

    /// Replaces this route's pinned files with `body`'s; refused whole past the bound.
    pub async fn keep(&self, body: &KeptBody) -> Result<KeptDoc, KeptError> {
        let bs = self.cache.settings.block_bytes;
        let fresh: HashMap<String, u64> = body.keys.iter().cloned().collect();
        let parts: PartsOf = body
            .parts
            .iter()
            .filter_map(|(k, ranges)| Some((k.clone(), blocks_of(ranges, bs, *fresh.get(k)?))))
            .collect();
        let wanted: u64 = body
            .keys
            .iter()
            .map(|(k, s)| self.owned_of(k, *s, parts.get(k)))
            .sum();
        let bound = self.cache.settings.kept_bytes as u64;
        {
            let Ok(mut routes) = self.cache.kept_ledger.by_route.lock() else {
                return Ok(self.kept_doc());
            };
            let others: u64 = routes
                .iter()
                .filter(|(route, _)| ***route != *self.bucket_key)
                .map(|(_, b)| *b)
                .sum();
            if wanted + others > bound {
                return Err(KeptError::OverBound {
                    wanted,
                    others,
                    bound,
                });
            }
            routes.insert(self.bucket_key.clone(), wanted);
        }
        let before = match self.kept.files.write() {
            Ok(mut files) => std::mem::replace(&mut *files, fresh.clone()),
            Err(_) => return Ok(self.kept_doc()),
        };
        let parts_before = self
            .cache
            .kept_parts
            .replace(&self.bucket_key, parts.clone());
        self.kept
            .owned_bytes
            .store(wanted, std::sync::atomic::Ordering::Relaxed);
        // A file whose kept blocks change (unpinned, pinned in part differently, or from
        // whole to part) is resolved again under its new class, and every kept block it no
        // longer keeps goes (of any version: a mapping the table no longer holds must not
        // leave bytes behind).
        let changed: Vec<&String> = before
            .keys()
            .chain(fresh.keys())
            .filter(|k| {
                before.contains_key(*k) != fresh.contains_key(*k)
                    || parts_before.get(*k) != parts.get(*k)
            })
            .collect();
        for key in &changed {
            self.map.unmap(key);
        }
        let still_kept = |key: &str, index: u64| {
            fresh.contains_key(key)
                && parts
                    .get(key)
                    .is_none_or(|blocks| blocks.binary_search(&index).is_ok())
        };
        if changed.iter().any(|k| before.contains_key(*k)) {
            let mut doomed = Vec::new();
            self.cache
                .kept
                .flush_if(|k, _| {
                    if *k.bucket == *self.bucket_key
                        && before.contains_key(&*k.key)
                        && !still_kept(&k.key, k.index)
                    {
                        doomed.push(k.clone());
                    }
                    false // nothing is written: the kept store has no disk tier
                })
                .await;
            for k in &doomed {
                self.cache.kept.remove(k);
            }
        }
        Ok(self.kept_doc())
    }

    /// [`BlockFilter::kept_doc`], after dropping the route's kept blocks this node no longer
    /// owns (the fleet's view moved: a node that owned them while a peer was away keeps them
    /// no longer once the peer, their owner, is back).
    pub async fn kept_now(&self) -> KeptDoc {
        let mut doomed = Vec::new();
        self.cache
            .kept
            .flush_if(|k, _| {
                let owner_elsewhere = self
                    .fleet
                    .as_ref()
                    .is_some_and(|f| f.owner(&self.bucket_key, &k.key, k.index).is_some());
                if *k.bucket == *self.bucket_key && owner_elsewhere {
                    doomed.push(k.clone());
                }
                false // nothing is written: the kept store has no disk tier
            })
            .await;
        for k in &doomed {
            self.cache.kept.remove(k);
        }
        self.kept_doc()
    }

    /// What this node keeps of the route's pinned files.
    pub fn kept_doc(&self) -> KeptDoc {
        // What this node owns moves with the fleet's view (a node that restarted alone owned
        // everything at first): counted again now, and the ledger follows.
        let files: Vec<(String, u64)> = self
            .kept
            .files
            .read()
            .map(|f| f.iter().map(|(k, s)| (k.clone(), *s)).collect())
            .unwrap_or_default();
        let owned: u64 = files
            .iter()
            .map(|(k, size)| {
                let part = self.cache.kept_parts.get(&self.bucket_key, k);
                self.owned_of(k, *size, part.as_ref())
            })
            .sum();
        self.kept
            .owned_bytes
            .store(owned, std::sync::atomic::Ordering::Relaxed);
        let pinned = match self.cache.kept_ledger.by_route.lock() {
            Ok(mut routes) => {
                if !files.is_empty() || routes.contains_key(&self.bucket_key) {
                    routes.insert(self.bucket_key.clone(), owned);
                }
                routes.values().sum()
            }
            Err(_) => 0,
        };
        KeptDoc {
            keys: files.len() as u64,
            owned_bytes: owned,
            pinned_bytes: pinned,
            held_bytes: self.cache.kept.memory().usage() as u64,
            bound_bytes: self.cache.settings.kept_bytes as u64,
        }
    }
}
