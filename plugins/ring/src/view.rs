//! The membership view and owner selection: the live members gossip reports, published with
//! one pointer swap (readers on the miss path never lock), and the weighted rendezvous owner of
//! a block over the `active` ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use floe_core::fleet::{Peer, PeerRef};

use crate::hrw::{self, Candidate};

/// A member's state, as it gossips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Owns blocks.
    Active,
    /// Leaving: owns nothing, still serves peers as a donor.
    Draining,
}

impl MemberState {
    /// The gossiped value.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Active => "active",
            MemberState::Draining => "draining",
        }
    }

    /// Parses a gossiped value (anything unknown is not active).
    pub fn parse(s: &str) -> Self {
        if s == "active" {
            MemberState::Active
        } else {
            MemberState::Draining
        }
    }
}

/// One live member.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its id and peer address.
    pub peer: PeerRef,
    /// Its start time (ms since the epoch): a restarted node is a new generation.
    pub generation: u64,
    /// Advertised capacity (weight).
    pub capacity: u64,
    /// Zone ("" when unset).
    pub zone: Arc<str>,
    /// Active or draining.
    pub state: MemberState,
    /// Its admin API URL ("" when it has none), for the control plane.
    pub admin_url: Arc<str>,
    /// What its plugins published (see [`floe_core::fleet::Fleet::publish`]), by key.
    pub published: Vec<(Arc<str>, Arc<str>)>,
}

impl Candidate for Member {
    fn id(&self) -> &str {
        &self.peer.id
    }
    fn weight(&self) -> u64 {
        self.capacity
    }
}

/// The live members, sorted by id.
#[derive(Debug, Default)]
pub struct View {
    /// Members (this node included while it is live).
    pub members: Vec<Member>,
}

impl View {
    /// A view of `members` (sorted here).
    /// A restarted node seen twice (old generation not yet declared dead) counts once, as its
    /// newest generation.
    pub fn new(mut members: Vec<Member>) -> Self {
        members.sort_by(|a, b| {
            a.peer
                .id
                .cmp(&b.peer.id)
                .then(b.generation.cmp(&a.generation))
        });
        members.dedup_by(|later, first| later.peer.id == first.peer.id);
        Self { members }
    }

    /// The active owner of block `index` of (`bucket`, `key`), among the members of `zone`
    /// when it is set and has an active member (each zone then fills once, and reads stay in
    /// their zone), else among all.
    pub fn owner(&self, bucket: &str, key: &str, index: u64, zone: &str) -> Option<&Member> {
        let zoned = !zone.is_empty() && self.active().any(|m| &*m.zone == zone);
        let i = hrw::owner(&self.members, bucket, key, index, |m| {
            m.state != MemberState::Active || (zoned && &*m.zone != zone)
        })?;
        self.members.get(i)
    }

    /// Whether owners are chosen within `zone` (see [`View::owner`]).
    fn zoned(&self, zone: &str) -> bool {
        !zone.is_empty() && self.active().any(|m| &*m.zone == zone)
    }

    /// The members as `id` (active) or `id(draining)`, comma-separated, for logs.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(&m.peer.id);
            if m.state != MemberState::Active {
                out.push_str("(draining)");
            }
        }
        out
    }

    /// Ids of the active members.
    pub fn active(&self) -> impl Iterator<Item = &Member> {
        self.members
            .iter()
            .filter(|m| m.state == MemberState::Active)
    }
}

/// The published view.
pub struct Membership {
    me: Arc<str>,
    zone: Arc<str>,
    view: ArcSwap<View>,
    joined: Instant,
    warm: Duration,
}

impl Membership {
    /// An empty view for node `me`.
    pub fn new(me: Arc<str>) -> Self {
        Self::warming(me, Duration::ZERO)
    }

    /// This node's zone is `zone` (owners are preferred within it).
    pub fn in_zone(mut self, zone: &str) -> Self {
        self.zone = Arc::from(zone);
        self
    }

    /// An empty view for node `me`, which pulls blocks it now owns from their previous owners
    /// for `warm` after it starts.
    pub fn warming(me: Arc<str>, warm: Duration) -> Self {
        Self {
            me,
            zone: Arc::from(""),
            view: ArcSwap::from_pointee(View::default()),
            joined: Instant::now(),
            warm,
        }
    }

    /// This node's id.
    pub fn me(&self) -> &Arc<str> {
        &self.me
    }

    /// The current view.
    pub fn load(&self) -> arc_swap::Guard<Arc<View>> {
        self.view.load()
    }

    /// Whether this node is still in its warming window.
    pub fn is_warming(&self) -> bool {
        self.joined.elapsed() < self.warm
    }

    /// Publishes a new view; returns how many of 64 probe blocks changed owner (a sample for
    /// the owner-moves metric) and the view it replaced.
    pub fn publish(&self, next: View) -> (usize, Arc<View>) {
        self.publish_arc(Arc::new(next))
    }

    /// As [`Membership::publish`], for a shared view.
    pub fn publish_arc(&self, next: Arc<View>) -> (usize, Arc<View>) {
        let before = self.view.swap(next);
        let after = self.view.load();
        let moved = (0..64u64)
            .filter(|i| {
                let a = before.owner("", "probe", *i, "").map(|m| &m.peer.id);
                let b = after.owner("", "probe", *i, "").map(|m| &m.peer.id);
                a != b
            })
            .count();
        (moved, before)
    }

    /// See [`floe_core::fleet::Fleet::donors`].
    pub fn donors(&self, bucket: &str, key: &str, index: u64) -> Vec<PeerRef> {
        let view = self.view.load();
        let ms = &view.members;
        let me = |m: &Member| m.peer.id == self.me;
        let mut out: Vec<PeerRef> = Vec::new();
        let zoned = view.zoned(&self.zone);
        let other_zone = |m: &Member| zoned && m.zone != self.zone;
        // Ownership as it was before any member began draining: a draining winner hands over.
        let before = hrw::owner(ms, bucket, key, index, other_zone);
        if let Some(m) = before.and_then(|i| ms.get(i)) {
            if m.state == MemberState::Draining && !me(m) {
                out.push(m.peer.clone());
            }
        }
        if self.joined.elapsed() < self.warm {
            // Ownership without this node: whom it took the block from when it joined.
            let prev = hrw::owner(ms, bucket, key, index, |m| {
                me(m) || m.state != MemberState::Active || other_zone(m)
            });
            if let Some(m) = prev.and_then(|i| ms.get(i)) {
                if !out.iter().any(|p| p.id == m.peer.id) {
                    out.push(m.peer.clone());
                }
            }
        }
        out
    }

    /// The owner of a block when its owner `busy` refuses: the next choice among the active
    /// members (`None`: this node).
    pub fn next_owner(
        &self,
        bucket: &str,
        key: &str,
        index: u64,
        busy: &PeerRef,
    ) -> Option<PeerRef> {
        let view = self.view.load();
        let ms = &view.members;
        let zoned = view.zoned(&self.zone);
        let i = hrw::owner(ms, bucket, key, index, |m| {
            m.state != MemberState::Active || m.peer.id == busy.id || (zoned && m.zone != self.zone)
        })?;
        let m = ms.get(i)?;
        (m.peer.id != self.me).then(|| m.peer.clone())
    }

    /// Every active member, this node included, best rendezvous score over `name` first.
    pub fn ranked(&self, name: &str) -> Vec<PeerRef> {
        let view = self.view.load();
        let mut scored: Vec<(f64, &Member)> = view
            .active()
            .map(|m| {
                let h = hrw::block_hash(&m.peer.id, "", name, 0);
                (hrw::score(h, m.capacity), m)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.peer.id.cmp(&b.1.peer.id)));
        scored.into_iter().map(|(_, m)| m.peer.clone()).collect()
    }

    /// Every live member (active or draining) but this node.
    pub fn others(&self) -> Vec<PeerRef> {
        let view = self.view.load();
        view.members
            .iter()
            .filter(|m| m.peer.id != self.me)
            .map(|m| m.peer.clone())
            .collect()
    }

    /// A live member by id.
    pub fn member(&self, id: &str) -> Option<PeerRef> {
        let view = self.view.load();
        let m = view.members.iter().find(|m| &*m.peer.id == id)?;
        Some(m.peer.clone())
    }

    /// What member `id` published under `key`.
    pub fn published(&self, id: &str, key: &str) -> Option<Arc<str>> {
        let view = self.view.load();
        let m = view.members.iter().find(|m| &*m.peer.id == id)?;
        let (_, v) = m.published.iter().find(|(k, _)| &**k == key)?;
        Some(v.clone())
    }

    /// The owner of a block: `None` when it is this node or no active member is known.
    pub fn owner(&self, bucket: &str, key: &str, index: u64) -> Option<PeerRef> {
        let view = self.view.load();
        let m = view.owner(bucket, key, index, &self.zone)?;
        (m.peer.id != self.me).then(|| m.peer.clone())
    }
}

/// A member record (used by gossip and tests).
pub fn member(id: &str, addr: &str, capacity: u64, state: MemberState) -> Member {
    Member {
        peer: Arc::new(Peer {
            id: Arc::from(id),
            addr: Arc::from(addr),
        }),
        generation: 0,
        capacity,
        zone: Arc::from(""),
        state,
        admin_url: Arc::from(""),
        published: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_stay_in_the_zone_when_it_has_an_active_member() {
        let zoned = |id: &str, zone: &str| Member {
            zone: Arc::from(zone),
            ..member(id, "127.0.0.1:1", 1, MemberState::Active)
        };
        let m = Membership::new(Arc::from("a1")).in_zone("a");
        m.publish(View::new(vec![
            zoned("a1", "a"),
            zoned("a2", "a"),
            zoned("b1", "b"),
        ]));
        for i in 0..100 {
            if let Some(p) = m.owner("wh", "k", i) {
                assert_eq!(&*p.id, "a2", "never the other zone");
            }
        }
        let alone = Membership::new(Arc::from("c1")).in_zone("c");
        alone.publish(View::new(vec![zoned("a1", "a"), zoned("b1", "b")]));
        assert!(
            (0..20).any(|i| alone.owner("wh", "k", i).is_some()),
            "no member in zone c: all"
        );
    }

    #[test]
    fn a_busy_owner_hands_to_the_next_choice() {
        let m = Membership::new(Arc::from("a"));
        m.publish(View::new(vec![
            member("a", "127.0.0.1:1", 1, MemberState::Active),
            member("b", "127.0.0.1:2", 1, MemberState::Active),
            member("c", "127.0.0.1:3", 1, MemberState::Active),
        ]));
        for i in 0..100 {
            let Some(owner) = m.owner("wh", "k", i) else {
                continue;
            };
            let next = m.next_owner("wh", "k", i, &owner);
            assert_ne!(next.as_ref().map(|p| p.id.clone()), Some(owner.id.clone()));
        }
    }

    #[test]
    fn a_node_asks_peers_for_what_it_does_not_own_and_nobody_asks_a_drainer() {
        let m = Membership::new(Arc::from("b"));
        assert_eq!(m.owner("wh", "k", 0), None, "no view: this node fills");
        m.publish(View::new(vec![
            member("a", "127.0.0.1:1", 1, MemberState::Active),
            member("b", "127.0.0.1:2", 1, MemberState::Active),
            member("c", "127.0.0.1:3", 1, MemberState::Draining),
        ]));
        let mut mine = 0;
        for i in 0..200 {
            match m.owner("wh", "k", i) {
                None => mine += 1,
                Some(p) => assert_eq!(&*p.id, "a", "c is draining"),
            }
        }
        assert!((60..140).contains(&mine), "b owns about half: {mine}");
    }
}
