//! The index of staged writes: by bucket, then key, the write a key's last acknowledgment is
//! (what this node serves reads of the key from, until the origin has it). One owner, one job:
//! it orders writes and counts them; what an indexing changes elsewhere (the block cache's
//! version of the key, the free of a displaced write) is the [`crate::node::Node`]'s to do with
//! what these methods return.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::id::ObjectId;
use crate::journal::Record;

type ByKey = HashMap<String, HashMap<String, Arc<Record>>>;

/// Staged writes by bucket and key.
#[derive(Default)]
pub(crate) struct Index {
    /// Looked up by `&str`: no allocation on a read.
    by_key: RwLock<ByKey>,
    /// How many writes `by_key` holds: a read of a route with none staged takes no lock.
    count: AtomicUsize,
}

/// What [`Index::insert`] did.
#[derive(Debug)]
pub(crate) struct Inserted {
    /// The write is now its key's (false: a later write of the key is indexed).
    pub kept: bool,
    /// The write it displaced, or the write itself when it was not kept: no longer any key's.
    pub displaced: Option<Arc<Record>>,
}

impl Index {
    /// The staged write of (`bucket`, `key`), if there is one.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Arc<Record>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let by_key = self.by_key.read().ok()?;
        by_key.get(bucket)?.get(key).cloned()
    }

    /// How many writes are indexed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Every indexed write, oldest acknowledgment first.
    pub fn all(&self) -> Vec<Arc<Record>> {
        let mut all: Vec<Arc<Record>> = self
            .by_key
            .read()
            .map(|d| d.values().flat_map(|keys| keys.values().cloned()).collect())
            .unwrap_or_default();
        all.sort_by_key(|r| r.acked_ms);
        all
    }

    /// Whether `r` is still its key's staged write.
    pub fn current(&self, r: &Record) -> bool {
        self.get(&r.bucket, &r.key)
            .is_some_and(|cur| cur.id == r.id)
    }

    /// Indexes `r` unless a later write of its key is indexed. The same write again replaces
    /// its copy (a journal copy carries newer placements).
    pub fn insert(&self, r: Arc<Record>) -> Inserted {
        let Ok(mut by_key) = self.by_key.write() else {
            return Inserted {
                kept: false,
                displaced: None,
            };
        };
        let keys = by_key.entry(r.bucket.clone()).or_default();
        let out = match keys.get(&r.key) {
            Some(cur) if cur.id != r.id && later(cur, &r) => Inserted {
                kept: false,
                displaced: Some(r),
            },
            Some(cur) if cur.id == r.id => {
                keys.insert(r.key.clone(), r);
                Inserted {
                    kept: true,
                    displaced: None,
                }
            }
            _ => Inserted {
                kept: true,
                displaced: keys.insert(r.key.clone(), r),
            },
        };
        self.recount(&mut by_key);
        out
    }

    /// Drops `r` if it is its key's staged write; true when it was.
    pub fn remove(&self, r: &Record) -> bool {
        let Ok(mut by_key) = self.by_key.write() else {
            return false;
        };
        let Some(keys) = by_key.get_mut(&r.bucket) else {
            return false;
        };
        if keys.get(&r.key).is_none_or(|cur| cur.id != r.id) {
            return false;
        }
        keys.remove(&r.key);
        self.recount(&mut by_key);
        true
    }

    /// Drops write `id`, whatever its key; the (bucket, key) it was staged for, if indexed.
    pub fn remove_id(&self, id: &ObjectId) -> Vec<(String, String)> {
        let mut gone = Vec::new();
        if let Ok(mut by_key) = self.by_key.write() {
            for (bucket, keys) in by_key.iter_mut() {
                keys.retain(|key, r| {
                    let keep = r.id != *id;
                    if !keep {
                        gone.push((bucket.clone(), key.clone()));
                    }
                    keep
                });
            }
            self.recount(&mut by_key);
        }
        gone
    }

    /// Drops emptied buckets and publishes the count.
    fn recount(&self, by_key: &mut ByKey) {
        by_key.retain(|_, keys| !keys.is_empty());
        let n = by_key.values().map(HashMap::len).sum();
        self.count.store(n, Ordering::Relaxed);
    }
}

/// Whether `a` is the later of two writes of one key: its acknowledgment is, ties broken by
/// id, so every node picks the same.
fn later(a: &Record, b: &Record) -> bool {
    (a.acked_ms, a.id) > (b.acked_ms, b.id)
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
