//! Room for fragments, known before the body: each node gossips its free fragment bytes (its
//! write-back ceiling less what is kept and reserved), and a coordinator plans a write only
//! over nodes that advertise room for their fragment. A node whose room is not known yet (it
//! just joined) is planned; its reservation on receipt (see [`crate::fragments`]) still
//! refuses what would pass its ceiling, and the write is then short of a report (synchronous
//! to the origin, or an error below k), never over a ceiling.
//!
//! Gossip carries each change to every node, so the advertised figure moves in steps
//! ([`STEP_DIVISOR`]) and at most once per [`EVERY`], not per fragment.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::fleet::PeerRef;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::node::Node;

/// The published key.
pub const KEY: &str = "writeback.free_bytes";

/// How often the free bytes are looked at (and published when they moved a step).
pub const EVERY: Duration = Duration::from_millis(500);

/// A change of at least 1/64 of the ceiling is published; smaller ones wait. Between two
/// publications a node may take up to that much more than it advertises, which its own
/// reservations absorb.
pub const STEP_DIVISOR: u64 = 64;

impl Node {
    /// This node's free fragment bytes.
    pub fn free_bytes(&self) -> u64 {
        let f = &self.store.fragments;
        f.ceiling().saturating_sub(f.used())
    }

    /// Whether `peer` advertises room for `bytes` (this node: its own count; unknown: yes).
    pub fn has_room(&self, peer: &PeerRef, bytes: u64) -> bool {
        if *peer.id == *self.me() {
            return self.free_bytes() >= bytes;
        }
        self.fleet
            .published(&peer.id, KEY)
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|free| free >= bytes)
    }

    /// The free bytes each other member advertises, by id (for the admin API).
    pub fn advertised(&self) -> std::collections::BTreeMap<String, u64> {
        self.others()
            .iter()
            .filter_map(|p| {
                let v = self.fleet.published(&p.id, KEY)?;
                Some((p.id.to_string(), v.parse().ok()?))
            })
            .collect()
    }
}

/// Whether free bytes moved from `last` to `now` by a step of `ceiling` worth publishing.
pub fn moved(last: Option<u64>, now: u64, ceiling: u64) -> bool {
    let step = (ceiling / STEP_DIVISOR).max(1);
    last.is_none_or(|l| l.abs_diff(now) >= step || (now < step && l != now))
}

/// Publishes this node's free fragment bytes ("floe-writeback-room").
pub struct Advertiser {
    /// The node.
    pub node: Arc<Node>,
}

#[async_trait]
impl BackgroundService for Advertiser {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut last = None;
        let ceiling = self.node.store.fragments.ceiling();
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let now = self.node.free_bytes();
            if moved(last, now, ceiling) {
                self.node.fleet.publish(KEY, now.to_string()).await;
                last = Some(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bytes_are_published_first_then_in_steps_of_a_64th() {
        let c = 64 << 20; // a step is 1 MiB
        assert!(moved(None, c, c));
        assert!(!moved(Some(c), c - 1, c));
        assert!(moved(Some(c), c - (1 << 20), c));
        assert!(moved(Some(3 << 20), 5 << 20, c));
        // Near full every change counts: a node with no room must say so.
        assert!(moved(Some(10), 0, c));
        assert!(!moved(Some(0), 0, c));
    }
}
