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

    /// The class of a pinned file.
    pub fn class(key: &str) -> Class {
        Class {
            store: Store::Kept,
            immutable: true,
            parquet: key.ends_with(".parquet"),
        }
    }
}

impl BlockFilter {
    /// Bytes of the blocks of `key` (`size` bytes) this node owns.
    fn owned_of(&self, key: &str, size: u64) -> u64 {
        let Ok(object_key) = ObjectKey::parse(key) else {
            return 0;
        };
        let bs = self.cache.settings.block_bytes;
        // The rendezvous owner, donors or not: a hand-over's donor holds a block for a while,
        // the owner keeps it.
        (0..size.div_ceil(bs))
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
        let wanted: u64 = body.keys.iter().map(|(k, s)| self.owned_of(k, *s)).sum();
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
        let fresh: HashMap<String, u64> = body.keys.iter().cloned().collect();
        let before = match self.kept.files.write() {
            Ok(mut files) => std::mem::replace(&mut *files, fresh.clone()),
            Err(_) => return Ok(self.kept_doc()),
        };
        self.kept
            .owned_bytes
            .store(wanted, std::sync::atomic::Ordering::Relaxed);
        let gone: Vec<&String> = before.keys().filter(|k| !fresh.contains_key(*k)).collect();
        if !gone.is_empty() {
            // Unpinned: resolved again under the rules' class, and every kept block of it goes
            // (of any version: a mapping the table no longer holds must not leave bytes behind).
            for key in &gone {
                self.map.unmap(key);
            }
            let mut doomed = Vec::new();
            self.cache
                .kept
                .flush_if(|k, _| {
                    if *k.bucket == *self.bucket_key
                        && before.contains_key(&*k.key)
                        && !fresh.contains_key(&*k.key)
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
        for key in fresh.keys().filter(|k| !before.contains_key(*k)) {
            self.map.unmap(key); // resolved again as kept
        }
        Ok(self.kept_doc())
    }

    /// What this node keeps of the route's pinned files.
    pub fn kept_doc(&self) -> KeptDoc {
        let pinned = self
            .cache
            .kept_ledger
            .by_route
            .lock()
            .map(|r| r.values().sum())
            .unwrap_or(0);
        KeptDoc {
            keys: self.kept.files.read().map(|f| f.len() as u64).unwrap_or(0),
            owned_bytes: self
                .kept
                .owned_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            pinned_bytes: pinned,
            held_bytes: self.cache.kept.memory().usage() as u64,
            bound_bytes: self.cache.settings.kept_bytes as u64,
        }
    }
}
