//! Warmth hand-over when ownership moves. A node that joins takes over, from every other
//! member, the warm state it now owns; when a member starts draining, the nodes that now own
//! its state take it from it. This worker decides who gives and paces the bytes; each plugin's
//! [`Warmth`] takes what it owns through its own peer service (the block cache pulls recently
//! served blocks, hottest first, only what the giver holds). Until a block is pulled, a miss on
//! it still asks the giver first (the donor path), so nothing waits on the hand-over.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use floe_core::fleet::{Pacer, PeerRef, Warmth};
use tokio::sync::mpsc;

use crate::metrics;
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
    /// The plugins' takers (the block cache's, one per bucket).
    pub takers: Takers,
    /// Pace, bytes per second.
    pub bytes_per_sec: u64,
    /// Most items one taker takes from one giver.
    pub max_items: usize,
    /// Progress.
    pub progress: Arc<Progress>,
}

/// The registered takers.
pub type Takers = Arc<Mutex<Vec<Arc<dyn Warmth>>>>;

impl Handover {
    /// Takes over from each giver sent on `rx`, one at a time, until the channel closes.
    pub async fn run(self, mut rx: mpsc::UnboundedReceiver<PeerRef>) {
        while let Some(from) = rx.recv().await {
            let takers = match self.takers.lock() {
                Ok(t) => t.clone(),
                Err(_) => continue,
            };
            let pacer = Pacer::new(self.bytes_per_sec);
            for taker in takers {
                let done = taker.take_over(&from, self.max_items, &pacer).await;
                self.progress
                    .blocks
                    .fetch_add(done.items, Ordering::Relaxed);
                self.progress.bytes.fetch_add(done.bytes, Ordering::Relaxed);
                self.progress
                    .failed
                    .fetch_add(done.failed, Ordering::Relaxed);
                metrics::with(|m| m.handover_bytes.inc_by(done.bytes));
            }
            self.progress.finished(&from.id);
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
