//! Warmth hand-over when ownership moves: the fleet decides who gives (a member that began
//! draining; while this node warms up after joining, each member it meets) and paces the
//! bytes; each plugin that keeps warm state ([`Warmth`]) takes over what it now owns, through
//! its own peer service.

use async_trait::async_trait;

use crate::fleet::PeerRef;

/// What one [`Warmth::take_over`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandOver {
    /// Items taken.
    pub items: u64,
    /// Bytes taken.
    pub bytes: u64,
    /// Items the giver no longer held, or that failed.
    pub failed: u64,
}

/// Paces a hand-over to a byte rate: each taken item's bytes push the next start later.
#[derive(Debug)]
pub struct Pacer {
    rate: f64,
    next: tokio::sync::Mutex<tokio::time::Instant>,
}

impl Pacer {
    /// A pacer of `bytes_per_sec` (at least 1).
    pub fn new(bytes_per_sec: u64) -> Self {
        Self {
            rate: bytes_per_sec.max(1) as f64,
            next: tokio::sync::Mutex::new(tokio::time::Instant::now()),
        }
    }

    /// Waits until the next item may start.
    pub async fn ready(&self) {
        let at = *self.next.lock().await;
        tokio::time::sleep_until(at).await;
    }

    /// Records `bytes` taken: the next item waits for them at the rate.
    pub async fn spent(&self, bytes: u64) {
        let mut next = self.next.lock().await;
        let now = tokio::time::Instant::now();
        *next = (*next).max(now) + std::time::Duration::from_secs_f64(bytes as f64 / self.rate);
    }
}

/// A plugin's warm state that follows ownership (the block cache's recently served blocks).
///
/// Contract: the taker decides what it takes, not the giver (the view change that prompted
/// the hand-over may not have reached the giver yet); it takes only what the giver holds,
/// never asking the origin; it calls [`Pacer::ready`] before and [`Pacer::spent`] after each
/// item.
#[async_trait]
pub trait Warmth: Send + Sync {
    /// Takes over from `giver` at most `max_items` of what this node now owns, hottest first.
    async fn take_over(&self, giver: &PeerRef, max_items: usize, pacer: &Pacer) -> HandOver;
}
