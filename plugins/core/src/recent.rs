//! The members seen live lately. A node that restarts is back serving reads (with what it
//! resolved or replayed before) some seconds before every other node's view lists it again;
//! a message that must reach every node that could serve a key (a forget, a journal copy, a
//! free) goes to the members that left the view within [`RECENT_FOR`] too, with a short wait
//! ([`DEPARTED_WAIT`]): one that is really gone costs a write that much, once per peer.
//!
//! ```
//! use std::sync::Arc;
//! use floe_core::fleet::Peer;
//! use floe_core::recent::RecentMembers;
//! let peer = |id: &str| Arc::new(Peer { id: Arc::from(id), addr: Arc::from("127.0.0.1:1") });
//! let recent = RecentMembers::default();
//! assert_eq!(recent.with(vec![peer("a"), peer("b")]).departed.len(), 0);
//! let seen = recent.with(vec![peer("a")]); // b left the view: still told, briefly
//! assert_eq!((seen.live.len(), seen.departed.len()), (1, 1));
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fleet::PeerRef;

/// How long a member that left the view is still sent what every node must hear: longer than
/// a restart and gossip's re-join take.
pub const RECENT_FOR: Duration = Duration::from_secs(60);
/// The longest a call to a member that left the view is waited for before the write goes on
/// (a restarted node answers in milliseconds; a gone one never does).
pub const DEPARTED_WAIT: Duration = Duration::from_millis(500);

/// The members of the view now, and those that left it within [`RECENT_FOR`].
#[derive(Debug, Default)]
pub struct Seen {
    /// In the view now.
    pub live: Vec<PeerRef>,
    /// Left it lately.
    pub departed: Vec<PeerRef>,
}

impl Seen {
    /// Both, live ones first.
    pub fn all(self) -> Vec<PeerRef> {
        let mut all = self.live;
        all.extend(self.departed);
        all
    }
}

/// The members this node saw live lately, by id.
#[derive(Debug, Default)]
pub struct RecentMembers {
    seen: Mutex<HashMap<Arc<str>, (PeerRef, Instant)>>,
}

impl RecentMembers {
    /// `live` (the view's other members now), and the members seen live within
    /// [`RECENT_FOR`] that it lacks.
    pub fn with(&self, live: Vec<PeerRef>) -> Seen {
        let Ok(mut seen) = self.seen.lock() else {
            return Seen {
                live,
                departed: Vec::new(),
            };
        };
        let now = Instant::now();
        for p in &live {
            seen.insert(p.id.clone(), (p.clone(), now));
        }
        seen.retain(|_, (_, at)| now.duration_since(*at) < RECENT_FOR);
        let departed = seen
            .values()
            .filter(|(p, _)| !live.iter().any(|l| l.id == p.id))
            .map(|(p, _)| p.clone())
            .collect();
        Seen { live, departed }
    }
}
