//! Whether this node caught up with its peers' journals, and so may answer write-back requests.
//! One owner, one job: the flag the request path reads without a lock, the channel those
//! waiting on it watch, the mark of this process's last absence handled ([`floe_core::away`]),
//! and the wake-up that sends the repair worker back to catching up. How catching up is done
//! is [`crate::catch_up`]'s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{watch, Notify};

/// A node's readiness.
pub(crate) struct Readiness {
    caught_up_flag: AtomicBool,
    caught_up: watch::Sender<bool>,
    /// The absences of this process handled so far: one after them sends the node back.
    away_mark: AtomicU64,
    /// Woken when the node must catch up again.
    recatch: Notify,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            caught_up_flag: AtomicBool::new(false),
            caught_up: watch::Sender::new(false),
            away_mark: AtomicU64::new(floe_core::away::Away::global().mark()),
            recatch: Notify::new(),
        }
    }
}

impl Readiness {
    /// Whether the node caught up; first sends it back if this process was away since.
    pub fn is_caught_up(&self) -> bool {
        self.notice_away();
        self.caught_up_flag.load(Ordering::Acquire)
    }

    /// Marks the node caught up with what its peers held when the absences counted by `mark`
    /// (taken when the catch-up began) were all this process had had.
    pub fn caught_up(&self, mark: u64) {
        self.away_mark.store(mark, Ordering::SeqCst);
        self.caught_up_flag.store(true, Ordering::Release);
        self.caught_up.send_replace(true);
    }

    /// Sends the node back to catching up if this process was away (frozen) since it last
    /// caught up: the journal copies and frees sent meanwhile may not have reached it.
    fn notice_away(&self) {
        let mark = self.away_mark.load(Ordering::SeqCst);
        if let Some(since) = floe_core::away::Away::global().away_since_now(mark) {
            self.back_from_away(since);
        }
    }

    /// Sends the node back to catching up: this process was away since `since` (wall-clock
    /// ms), so what the fleet freed or acknowledged meanwhile may not be here.
    pub fn back_from_away(&self, since: u64) {
        if self.caught_up_flag.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                since_ms = since,
                "this node was away: catching up before it answers write-back requests"
            );
            self.caught_up.send_replace(false);
        }
        self.recatch.notify_one();
    }

    /// Waits until the node caught up, at most `wait`.
    pub async fn wait(&self, wait: Duration) -> bool {
        if self.is_caught_up() {
            return true;
        }
        let mut rx = self.caught_up.subscribe();
        let caught = tokio::time::timeout(wait, rx.wait_for(|done| *done)).await;
        matches!(caught, Ok(Ok(_)))
    }

    /// Resolves when the node must catch up again.
    pub async fn recatch(&self) {
        self.recatch.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn caught_up_once_marked_and_back_when_away() {
        let r = Readiness::default();
        assert!(!r.is_caught_up());
        assert!(!r.wait(Duration::ZERO).await);
        r.caught_up(floe_core::away::Away::global().mark());
        assert!(r.is_caught_up() && r.wait(Duration::ZERO).await);
        r.back_from_away(1);
        assert!(!r.is_caught_up());
        // The wake-up was stored for the repair worker, which may not be waiting yet.
        tokio::time::timeout(Duration::from_secs(5), r.recatch())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_waiter_is_woken_when_the_node_catches_up() {
        let r = std::sync::Arc::new(Readiness::default());
        let waiter = tokio::spawn({
            let r = r.clone();
            async move { r.wait(Duration::from_secs(60)).await }
        });
        tokio::task::yield_now().await;
        r.caught_up(floe_core::away::Away::global().mark());
        assert!(waiter.await.unwrap());
    }
}
