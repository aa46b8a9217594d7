//! The catalog route's index of cached answers by namespace: how many answers a commit's
//! purge drops (the purge itself moves the namespace's generation: see `CatalogRoute`), and the
//! purge count a request notes when it begins. An answer whose request began before a purge is
//! not cached: the catalog may have answered it before the commit that purge follows. Bounded:
//! an entry older than the answers' TTL names an expired answer and is dropped when room is
//! needed; when every entry is live and the index is full, the new answer is not cached (so
//! the count stays exact).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most answers the index tracks. Catalog answers are small JSON documents and live for `ttl`
/// (30 s by default), so this is far above what any catalog's request rate fills.
pub const MAX_INDEXED: usize = 1 << 16;

/// Cached answer keys by scope (a dotted namespace; "" for config and lists).
pub struct ScopeIndex<K> {
    inner: Mutex<Inner<K>>,
    /// Purges so far (see [`ScopeIndex::purges`]): read without the lock when a request
    /// begins, moved and compared under it.
    purges: AtomicU64,
    max: usize,
    ttl: Duration,
}

struct Inner<K> {
    scopes: HashMap<String, HashMap<K, Instant>>,
    len: usize,
    /// No entry expires before this: a full index is not rescanned until then.
    next_expiry: Option<Instant>,
}

impl<K: Hash + Eq + Clone> ScopeIndex<K> {
    /// An index of at most `max` keys whose answers live for `ttl`.
    pub fn new(max: usize, ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner {
                scopes: HashMap::new(),
                len: 0,
                next_expiry: None,
            }),
            purges: AtomicU64::new(0),
            max,
            ttl,
        }
    }

    /// How many purges ran so far: a request notes it when it begins, and its answer is cached
    /// only if none ran since ([`ScopeIndex::insert`]).
    pub fn purges(&self) -> u64 {
        self.purges.load(Ordering::SeqCst)
    }

    /// Records `key` under `scope`, cached at `now`, for a request that began when
    /// [`ScopeIndex::purges`] was `since`. `false`: the index is full of live answers, or a
    /// purge ran since the request began, so this one must not be cached.
    pub fn insert(&self, scope: &str, key: K, now: Instant, since: u64) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        let inner = &mut *g;
        if self.purges.load(Ordering::SeqCst) != since {
            return false;
        }
        if inner.len >= self.max && inner.next_expiry.is_some_and(|t| t <= now) {
            let ttl = self.ttl;
            let mut oldest: Option<Instant> = None;
            for keys in inner.scopes.values_mut() {
                keys.retain(|_, at| now.duration_since(*at) < ttl);
                oldest = keys.values().copied().chain(oldest).min();
            }
            inner.scopes.retain(|_, keys| !keys.is_empty());
            inner.len = inner.scopes.values().map(HashMap::len).sum();
            inner.next_expiry = oldest.map(|t| t + ttl);
        }
        let keys = inner.scopes.entry(scope.to_owned()).or_default();
        if inner.len >= self.max && !keys.contains_key(&key) {
            return false;
        }
        if keys.insert(key, now).is_none() {
            inner.len += 1;
        }
        if inner.next_expiry.is_none() {
            inner.next_expiry = Some(now + self.ttl);
        }
        true
    }

    /// Takes every key of `scope` out of the index: a purge (answers of requests under way
    /// are not cached after it).
    pub fn take(&self, scope: &str) -> Vec<K> {
        let Ok(mut g) = self.inner.lock() else {
            return Vec::new();
        };
        self.purges.fetch_add(1, Ordering::SeqCst);
        let keys = g.scopes.remove(scope).unwrap_or_default();
        g.len -= keys.len();
        keys.into_keys().collect()
    }

    /// The scopes with keys.
    pub fn scopes(&self) -> Vec<String> {
        self.inner
            .lock()
            .map(|g| g.scopes.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// How many keys are tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map(|g| g.len).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_bounded_and_makes_room_from_expired_answers() {
        let ttl = Duration::from_secs(30);
        let idx = ScopeIndex::new(100, ttl);
        let t0 = Instant::now();
        for i in 0..1000u32 {
            let fits = idx.insert(&format!("ns{}", i % 7), i, t0, idx.purges());
            assert_eq!(fits, i < 100, "key {i}");
        }
        assert_eq!(idx.len(), 100);
        // Once the first answers have expired, new ones take their place.
        let later = t0 + ttl;
        for i in 1000..1100u32 {
            assert!(idx.insert("db", i, later, idx.purges()), "key {i}");
        }
        assert!(!idx.insert("db", 5000, later, idx.purges()));
        assert_eq!(idx.len(), 100);
        assert_eq!(idx.scopes(), vec!["db".to_owned()]);
        assert_eq!(idx.take("db").len(), 100);
        assert_eq!(idx.len(), 0);
        assert!(idx.insert("db", 1, later, idx.purges()));
    }

    #[test]
    fn the_same_key_twice_counts_once() {
        let idx = ScopeIndex::new(2, Duration::from_secs(1));
        let now = Instant::now();
        assert!(idx.insert("a", 1, now, idx.purges()));
        assert!(idx.insert("a", 1, now, idx.purges()));
        assert!(idx.insert("b", 2, now, idx.purges()));
        assert!(
            idx.insert("a", 1, now, idx.purges()),
            "a key already tracked is refreshed, not refused"
        );
        assert_eq!(idx.len(), 2);
    }

    #[test]
    fn an_answer_to_a_request_begun_before_a_purge_is_not_cached() {
        let idx = ScopeIndex::new(10, Duration::from_secs(30));
        let now = Instant::now();
        let began = idx.purges();
        assert!(idx.insert("db", 1, now, began));
        // A commit elsewhere purges "db" while a loadTable of another principal is under way.
        let in_flight = idx.purges();
        assert_eq!(idx.take("db"), vec![1]);
        assert!(
            !idx.insert("db", 2, now, in_flight),
            "its answer may predate the commit"
        );
        assert!(!idx.insert("other", 3, now, in_flight), "any purge counts");
        assert!(
            idx.insert("db", 2, now, idx.purges()),
            "a request begun after it is cached"
        );
    }
}
