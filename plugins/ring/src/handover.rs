//! Warmth hand-over when ownership moves. A node that joins pulls, from every other member,
//! the recently served blocks it now owns; when a member starts draining, the nodes that now
//! own its blocks pull them from it. Hottest (most recently served) first, paced to a byte
//! rate, only what the giver holds (never the origin). Until a block is pulled, a miss on it
//! still asks the giver first (the donor path), so nothing waits on the hand-over.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_core::fleet::{PeerRef, PeerServer};
use tokio::sync::mpsc;

use crate::client::PeerClient;
use crate::metrics;
use crate::server::{Servers, HOT_LIST_MAX};
use crate::view::{Member, MemberState, View};

/// What the hand-over worker has done (shown by `GET /fleet`).
#[derive(Debug, Default)]
pub struct Progress {
    /// Hand-overs finished.
    pub runs: AtomicU64,
    /// Blocks pulled.
    pub blocks: AtomicU64,
    /// Bytes pulled.
    pub bytes: AtomicU64,
    /// Blocks the giver no longer held, or that failed.
    pub failed: AtomicU64,
    /// The last givers whose hand-over finished, oldest first.
    pub givers: Mutex<VecDeque<String>>,
}

/// Givers `Progress` remembers.
const GIVERS_KEPT: usize = 16;

impl Progress {
    /// The last givers whose hand-over finished.
    pub fn givers(&self) -> Vec<String> {
        self.givers
            .lock()
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn finished(&self, giver: &str) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.givers.lock() {
            g.push_back(giver.to_owned());
            while g.len() > GIVERS_KEPT {
                g.pop_front();
            }
        }
    }
}

/// The members to pull from after the view went from `prev` to `next`: a member that began
/// draining; and, while this node is in its warming window, every active member it meets
/// that started before it (gossip may show a joiner its fleet a member at a time: each is a
/// giver in the view that brings it, not only those of the first view). A member that
/// started after this node joined later still and has nothing warm to give.
pub fn givers(prev: &View, next: &View, me: &str, warming: bool) -> Vec<PeerRef> {
    let mut out: Vec<PeerRef> = next
        .members
        .iter()
        .filter(|m| m.state == MemberState::Draining && &*m.peer.id != me)
        .filter(|m| {
            !prev
                .members
                .iter()
                .any(|p| p.peer.id == m.peer.id && p.state == MemberState::Draining)
        })
        .map(|m| m.peer.clone())
        .collect();
    if warming {
        let mine = next.members.iter().find(|m| &*m.peer.id == me);
        let my_generation = mine.map_or(u64::MAX, |m| m.generation);
        let met = |m: &Member| prev.active().any(|p| p.peer.id == m.peer.id);
        out.extend(
            next.active()
                .filter(|m| &*m.peer.id != me && !met(m) && m.generation <= my_generation)
                .map(|m| m.peer.clone()),
        );
    }
    out
}

/// The hand-over worker's settings and state.
pub struct Handover {
    /// This node's id.
    pub me: Arc<str>,
    /// Asks peers.
    pub client: Arc<PeerClient>,
    /// This node's servers by bucket.
    pub servers: Servers,
    /// Pace, bytes per second.
    pub bytes_per_sec: u64,
    /// Most blocks pulled from one giver per bucket.
    pub max_blocks: usize,
    /// Progress.
    pub progress: Arc<Progress>,
}

impl Handover {
    /// Pulls from each giver sent on `rx`, one at a time, until the channel closes.
    pub async fn run(self, mut rx: mpsc::UnboundedReceiver<PeerRef>) {
        while let Some(from) = rx.recv().await {
            let servers: Vec<(String, Arc<dyn PeerServer>)> = match self.servers.read() {
                Ok(s) => s.iter().map(|(b, s)| (b.clone(), s.clone())).collect(),
                Err(_) => continue,
            };
            for (bucket, server) in servers {
                self.pull_bucket(&from, &bucket, &*server).await;
            }
            self.progress.finished(&from.id);
        }
    }

    async fn pull_bucket(&self, from: &PeerRef, bucket: &str, server: &dyn PeerServer) {
        let list = match self.client.hot(from, bucket, HOT_LIST_MAX).await {
            Ok(l) => l
                .into_iter()
                .filter(|b| server.takes(b))
                .take(self.max_blocks)
                .collect::<Vec<_>>(),
            Err(e) => {
                tracing::info!(from = %from.id, bucket, error = %e, "no hand-over list");
                return;
            }
        };
        tracing::info!(from = %from.id, bucket, blocks = list.len(), "taking over warm blocks");
        let rate = self.bytes_per_sec.max(1) as f64;
        let mut next = tokio::time::Instant::now();
        for b in &list {
            tokio::time::sleep_until(next).await;
            match server.pull(b, from).await {
                Ok(n) => {
                    self.progress.blocks.fetch_add(1, Ordering::Relaxed);
                    self.progress.bytes.fetch_add(n, Ordering::Relaxed);
                    metrics::with(|m| m.handover_bytes.inc_by(n));
                    next += Duration::from_secs_f64(n as f64 / rate);
                }
                Err(e) => {
                    self.progress.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(from = %from.id, key = %b.key, error = %e, "hand-over pull failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::member;

    fn ids(v: Vec<PeerRef>) -> Vec<String> {
        v.iter().map(|p| p.id.to_string()).collect()
    }

    #[test]
    fn a_new_drainer_and_a_first_meeting_are_givers() {
        let a = |s| member("a", "x:1", 1, s);
        let b = |s| member("b", "x:2", 1, s);
        let me = member("me", "x:3", 1, MemberState::Active);
        let alone = View::new(vec![me.clone()]);
        let both = View::new(vec![
            me.clone(),
            a(MemberState::Active),
            b(MemberState::Active),
        ]);
        assert_eq!(ids(givers(&alone, &both, "me", true)), ["a", "b"]);
        // The fleet shown a member at a time: each is a giver in the view that brings it.
        let one = View::new(vec![me.clone(), a(MemberState::Active)]);
        assert_eq!(ids(givers(&alone, &one, "me", true)), ["a"]);
        assert_eq!(ids(givers(&one, &both, "me", true)), ["b"]);
        assert!(
            givers(&both, &both, "me", true).is_empty(),
            "once per member met"
        );
        // A member that started after this node has nothing warm for it.
        let mut late = b(MemberState::Active);
        late.generation = 5;
        let mut me_then = me.clone();
        me_then.generation = 4;
        let with_late = View::new(vec![me_then.clone(), a(MemberState::Active), late]);
        let before = View::new(vec![me_then, a(MemberState::Active)]);
        assert!(givers(&before, &with_late, "me", true).is_empty());
        assert!(
            givers(&alone, &both, "me", false).is_empty(),
            "past the warming window"
        );
        let drained = View::new(vec![
            me.clone(),
            a(MemberState::Draining),
            b(MemberState::Active),
        ]);
        assert_eq!(ids(givers(&both, &drained, "me", true)), ["a"]);
        assert!(
            givers(&drained, &drained, "me", true).is_empty(),
            "once per drain"
        );
    }
}
