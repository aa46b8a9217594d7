//! Single-flight: the first caller to miss a key claims it and does the work; concurrent
//! callers for the same key wait on the claim's channel instead of repeating it. Used for
//! block fills and for resolving key -> ETag.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Mutex;

use tokio::sync::watch;

use crate::block::Block;
use crate::store::BlockKey;

const SHARDS: usize = 64;

/// Why a fill did not deliver a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    /// The object changed at the origin (If-Match failed): the mapping is stale.
    #[error("the object changed at the origin")]
    Changed,
    /// The origin failed.
    #[error("{0}")]
    Failed(String),
}

/// A block's fill state: `None` while in flight; then the block as the fill left it.
pub type Slot = Option<Result<Block, FillError>>;

/// The outcome of claiming a key.
pub enum Claim<T> {
    /// This caller does the work and must publish `Some(result)` on the sender.
    Mine(watch::Sender<Option<T>>),
    /// Another caller is working; wait on the receiver.
    Theirs(watch::Receiver<Option<T>>),
}

/// Keys being worked on, sharded by hash.
pub struct SingleFlight<K, T> {
    shards: Vec<Mutex<HashMap<K, watch::Receiver<Option<T>>>>>,
    hasher: RandomState,
}

/// Block fills in flight.
pub type Inflight = SingleFlight<BlockKey, Result<Block, FillError>>;

impl<K: Hash + Eq + Clone, T: Clone> Default for SingleFlight<K, T> {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, T: Clone> SingleFlight<K, T> {
    fn shard(&self, key: &K) -> &Mutex<HashMap<K, watch::Receiver<Option<T>>>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// Claims `key`, or joins the work that holds it.
    pub fn claim(&self, key: &K) -> Claim<T> {
        let Ok(mut shard) = self.shard(key).lock() else {
            // A poisoned shard only means another thread panicked mid-update; work alone.
            return Claim::Mine(watch::channel(None).0);
        };
        if let Some(rx) = shard.get(key) {
            return Claim::Theirs(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        shard.insert(key.clone(), rx);
        Claim::Mine(tx)
    }

    /// Ends the claim on `key` (after the result is stored and published).
    pub fn release(&self, key: &K) {
        if let Ok(mut s) = self.shard(key).lock() {
            s.remove(key);
        }
    }
}

/// Waits for a result published on `rx`; `abandoned` if the worker vanished without one.
pub async fn wait_for<T: Clone>(mut rx: watch::Receiver<Option<T>>, abandoned: T) -> T {
    loop {
        if let Some(r) = rx.borrow_and_update().clone() {
            return r;
        }
        if rx.changed().await.is_err() {
            return rx.borrow().clone().unwrap_or(abandoned);
        }
    }
}

/// Waits for a block published on `rx`.
pub async fn wait(rx: watch::Receiver<Slot>) -> Result<Block, FillError> {
    wait_for(rx, Err(FillError::Failed("fill abandoned".into()))).await
}
