//! One upload of a key at a time on a node. The propagator and a request that must put an
//! earlier write at the origin before its own (`WritebackFilter::flush`) both upload under
//! the key's lock and look again, once they hold it, whether the write is still the key's
//! staged one: an upload that lost that race would otherwise land after the request it had to
//! precede (a DELETE, a newer write) and bring the old bytes back. A newer write's upload
//! waits for an older one's still under way, so the origin ends with the newer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::id::ObjectId;

/// A key's lock: its bucket and key.
type KeyOf = (String, String);

/// The upload locks of the keys being uploaded (or waited for) on this node.
#[derive(Default)]
pub struct Uploading {
    locks: Mutex<HashMap<KeyOf, Arc<tokio::sync::Mutex<()>>>>,
    /// The writes being uploaded now, by id: a free of one that a newer write already
    /// displaced from the index still finds its key, and waits for the upload.
    running: Mutex<HashMap<ObjectId, KeyOf>>,
}

/// An upload under way; it is no longer once this drops.
pub struct Running<'a> {
    uploading: &'a Uploading,
    id: ObjectId,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut r) = self.uploading.running.lock() {
            r.remove(&self.id);
        }
    }
}

impl Uploading {
    /// Waits until no other upload of `bucket`/`key` runs on this node; held until the guard
    /// drops. Locks nobody holds or waits for are dropped here (uploads are few: the map stays
    /// as small as the uploads under way). None only if the map's lock was poisoned.
    pub async fn lock(&self, bucket: &str, key: &str) -> Option<OwnedMutexGuard<()>> {
        let lock = {
            let mut locks = self.locks.lock().ok()?;
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            let entry = locks.entry((bucket.to_owned(), key.to_owned()));
            entry.or_default().clone()
        };
        Some(lock.lock_owned().await)
    }

    /// Notes that write `id` of `bucket`/`key` is being uploaded, until the mark drops.
    pub fn running(&self, id: ObjectId, bucket: &str, key: &str) -> Running<'_> {
        if let Ok(mut r) = self.running.lock() {
            r.insert(id, (bucket.to_owned(), key.to_owned()));
        }
        Running {
            uploading: self,
            id,
        }
    }

    /// The bucket and key of write `id` if it is being uploaded now.
    pub fn key_of(&self, id: &ObjectId) -> Option<KeyOf> {
        self.running.lock().ok()?.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // A zero timeout polls the lock once: it answers whether the lock is free right now.

    #[tokio::test]
    async fn a_second_upload_of_one_key_waits_for_the_first_and_other_keys_do_not() {
        let uploading = Uploading::default();
        let first = uploading.lock("b", "k").await;
        assert!(first.is_some());
        let other = tokio::time::timeout(Duration::ZERO, uploading.lock("b", "other"));
        assert!(other.await.is_ok(), "another key's upload must not wait");
        let same = tokio::time::timeout(Duration::ZERO, uploading.lock("b", "k"));
        assert!(
            same.await.is_err(),
            "the same key's second upload must wait"
        );
        drop(first);
        let after = tokio::time::timeout(Duration::ZERO, uploading.lock("b", "k"));
        assert!(after.await.is_ok());
    }
}
