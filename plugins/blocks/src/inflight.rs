//! Single-flight for block fills: the first request to miss a block claims it and fetches;
//! concurrent requests for the same block wait on the claim's channel instead of fetching.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::watch;

use crate::store::BlockKey;

const SHARDS: usize = 64;

/// Why a fill did not deliver a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FillError {
    /// The object changed at the origin (If-Match failed): the mapping is stale.
    Changed,
    /// The origin failed.
    Failed(String),
}

/// A block's fill state: `None` while in flight.
pub type Slot = Option<Result<Bytes, FillError>>;

/// The outcome of claiming a block.
pub enum Claim {
    /// This caller fetches and must publish on the sender.
    Mine(watch::Sender<Slot>),
    /// Another fill is under way; wait on the receiver.
    Theirs(watch::Receiver<Slot>),
}

/// Blocks being filled, sharded by key hash.
pub struct Inflight {
    shards: Vec<Mutex<HashMap<BlockKey, watch::Receiver<Slot>>>>,
    hasher: RandomState,
}

impl Default for Inflight {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl Inflight {
    fn shard(&self, key: &BlockKey) -> &Mutex<HashMap<BlockKey, watch::Receiver<Slot>>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// Claims `key`, or joins the fill that holds it.
    pub fn claim(&self, key: &BlockKey) -> Claim {
        let Ok(mut shard) = self.shard(key).lock() else {
            // A poisoned shard only means another thread panicked mid-update; fetch alone.
            return Claim::Mine(watch::channel(None).0);
        };
        if let Some(rx) = shard.get(key) {
            return Claim::Theirs(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        shard.insert(key.clone(), rx);
        Claim::Mine(tx)
    }

    /// Ends the claim on `key` (after the block is stored and published).
    pub fn release(&self, key: &BlockKey) {
        if let Ok(mut s) = self.shard(key).lock() {
            s.remove(key);
        }
    }
}

/// Waits for a block published on `rx`.
pub async fn wait(mut rx: watch::Receiver<Slot>) -> Result<Bytes, FillError> {
    loop {
        if let Some(r) = rx.borrow_and_update().clone() {
            return r;
        }
        if rx.changed().await.is_err() {
            return match rx.borrow().clone() {
                Some(r) => r,
                None => Err(FillError::Failed("fill abandoned".into())),
            };
        }
    }
}
