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
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::fleet::{Peer, PeerRef};

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

/// The members this node saw live lately, by id; kept in a file across restarts once
/// [`RecentMembers::keep_in`] named one.
#[derive(Debug, Default)]
pub struct RecentMembers {
    seen: Mutex<HashMap<Arc<str>, (PeerRef, Instant)>>,
    /// The file the members are kept in, and what it holds now.
    kept: OnceLock<(PathBuf, Mutex<String>)>,
}

impl RecentMembers {
    /// Keeps the members in `path` from now on, and takes the members it lists (those seen
    /// before a restart) as seen now. A restarted node's view lists only itself until gossip
    /// brings the others back, and a write it takes meanwhile must still reach every node that
    /// could serve the key (a member that is really gone costs [`DEPARTED_WAIT`] per message for
    /// [`RECENT_FOR`]). A file that cannot be read is taken as empty.
    pub fn keep_in(&self, path: PathBuf) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let before = parse(&text);
        if let Ok(mut seen) = self.seen.lock() {
            let now = Instant::now();
            for p in before {
                seen.entry(p.id.clone()).or_insert((p, now));
            }
        }
        let _ = self.kept.set((path, Mutex::new(text)));
    }

    /// Writes the members seen lately to the file [`RecentMembers::keep_in`] named, when they
    /// changed (a view change: rare, and a few hundred bytes).
    fn write_kept(&self, members: &[PeerRef]) {
        let Some((path, written)) = self.kept.get() else {
            return;
        };
        let text = render(members);
        let Ok(mut written) = written.lock() else {
            return;
        };
        if *written == text {
            return;
        }
        match std::fs::write(path, &text) {
            Ok(()) => *written = text,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the fleet's members could not be kept")
            }
        }
    }

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
        let departed: Vec<PeerRef> = seen
            .values()
            .filter(|(p, _)| !live.iter().any(|l| l.id == p.id))
            .map(|(p, _)| p.clone())
            .collect();
        let everyone: Vec<PeerRef> = if self.kept.get().is_some() {
            seen.values().map(|(p, _)| p.clone()).collect()
        } else {
            Vec::new()
        };
        drop(seen);
        if !everyone.is_empty() {
            self.write_kept(&everyone);
        }
        Seen { live, departed }
    }
}

/// One member a line, `id addr`, sorted by id.
fn render(members: &[PeerRef]) -> String {
    let mut lines: Vec<String> = members
        .iter()
        .map(|p| format!("{} {}\n", p.id, p.addr))
        .collect();
    lines.sort();
    lines.concat()
}

/// The members of a kept file (lines that are not `id addr` are skipped).
fn parse(text: &str) -> Vec<PeerRef> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(id, addr)| !id.is_empty() && !addr.is_empty() && !addr.contains(' '))
        .map(|(id, addr)| {
            Arc::new(Peer {
                id: Arc::from(id),
                addr: Arc::from(addr),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: &str) -> PeerRef {
        Arc::new(Peer {
            id: Arc::from(id),
            addr: Arc::from(format!("10.0.0.{}:7001", id.len()).as_str()),
        })
    }

    #[test]
    fn members_seen_before_a_restart_are_told_after_it() {
        let dir = std::env::temp_dir().join(format!("floe-recent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("members");
        let _ = std::fs::remove_file(&path);
        let before = RecentMembers::default();
        before.keep_in(path.clone());
        before.with(vec![peer("a"), peer("bb")]);
        // Restarted: gossip lists only one member so far; the other is still told, briefly.
        let after = RecentMembers::default();
        after.keep_in(path.clone());
        let seen = after.with(vec![peer("bb")]);
        let departed: Vec<&str> = seen.departed.iter().map(|p| &*p.id).collect();
        assert_eq!(departed, ["a"]);
        assert_eq!(&*seen.departed[0].addr, "10.0.0.1:7001");
        // Without a kept file nobody is remembered.
        assert!(RecentMembers::default().with(vec![]).departed.is_empty());
        // A damaged file is no members, not a failure.
        std::fs::write(&path, "garbage\n\n a b c\n").unwrap();
        let damaged = RecentMembers::default();
        damaged.keep_in(path.clone());
        assert!(damaged.with(vec![]).departed.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
