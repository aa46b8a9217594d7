//! One upload of a key at a time on a node. The propagator and a request that must put an
//! earlier write at the origin before its own (`WritebackFilter::flush`) both upload under
//! the key's lock and look again, once they hold it, whether the write is still the key's
//! staged one: an upload that lost that race would otherwise land after the request it had to
//! precede (a DELETE, a newer write) and bring the old bytes back. A newer write's upload
//! waits for an older one's still under way, so the origin ends with the newer.
//!
//! A write freed because the origin holds it (another node put it there: it took over from a
//! coordinator its view had lost) takes no key lock here (this node's own flush frees it while
//! holding the lock), but it waits until no upload of that write runs here ([`Uploading::idle`]):
//! a coordinator frozen mid-upload and thawed would otherwise finish its copy after the DELETE
//! or write that the takeover let through.

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
    /// The writes being uploaded now, by id, with how many marks each has (a caller marks
    /// the write before it looks whether it is still current, and the upload marks it again):
    /// a free of one that a newer write already displaced from the index still finds its key,
    /// and waits for the upload.
    running: Mutex<HashMap<ObjectId, (KeyOf, usize)>>,
    /// Woken whenever a mark drops.
    ended: tokio::sync::Notify,
}

/// An upload under way; it is no longer once this drops.
pub struct Running<'a> {
    uploading: &'a Uploading,
    id: ObjectId,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut r) = self.uploading.running.lock() {
            if let Some((_, marks)) = r.get_mut(&self.id) {
                *marks = marks.saturating_sub(1);
                if *marks == 0 {
                    r.remove(&self.id);
                }
            }
        }
        self.uploading.ended.notify_waiters();
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

    /// Notes that write `id` of `bucket`/`key` is being uploaded, until the mark drops (marks
    /// nest: the write is running until the last one drops).
    pub fn running(&self, id: ObjectId, bucket: &str, key: &str) -> Running<'_> {
        if let Ok(mut r) = self.running.lock() {
            let entry = r
                .entry(id)
                .or_insert_with(|| ((bucket.to_owned(), key.to_owned()), 0));
            entry.1 += 1;
        }
        Running {
            uploading: self,
            id,
        }
    }

    /// The bucket and key of write `id` if it is being uploaded now.
    pub fn key_of(&self, id: &ObjectId) -> Option<KeyOf> {
        Some(self.running.lock().ok()?.get(id)?.0.clone())
    }

    /// Returns once no upload of write `id` runs on this node (at once if none does).
    pub async fn idle(&self, id: &ObjectId) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.key_of(id).is_none() {
                return;
            }
            ended.await;
        }
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

    #[tokio::test]
    async fn idle_waits_for_the_last_mark_of_a_write_to_drop() {
        let uploading = Uploading::default();
        let (id, other) = (ObjectId::random(), ObjectId::random());
        let outer = uploading.running(id, "b", "k");
        let inner = uploading.running(id, "b", "k");
        let idle = |id| tokio::time::timeout(Duration::ZERO, uploading.idle(id));
        assert!(idle(&other).await.is_ok(), "no upload of it: idle at once");
        drop(inner);
        assert!(idle(&id).await.is_err(), "one mark left: still running");
        assert_eq!(uploading.key_of(&id), Some(("b".into(), "k".into())));
        // The waiter is woken by the last mark's drop (a second's bound: a lost wake-up fails).
        let last = async {
            tokio::task::yield_now().await;
            drop(outer);
        };
        let both = async { tokio::join!(last, uploading.idle(&id)) };
        assert!(tokio::time::timeout(Duration::from_secs(1), both)
            .await
            .is_ok());
        assert_eq!(uploading.key_of(&id), None);
    }
}
