//! Forgets a node missed while it was away. A member that does not confirm a [`Forget`] is
//! retried, but after a backoff (up to [`crate::forget::RETRY_MAX_WAIT`]), and not at all once
//! gossip dropped it from the view; a node back from a freeze, or restarted with its persisted
//! mappings, would meanwhile answer from the version a write replaced.
//!
//! So every node keeps the forgets it sent or applied for [`KEEP`] ([`ForgetLog`]), and a node
//! back from away asks every peer for those since it left (`GET /v2/x/blocks/missed?since=MS`,
//! answered with [`Missed`]) and applies them before it answers a read: at its first request
//! after a freeze ([`floe_core::away`]); after a restart, from the time its last
//! [`ALIVE_FILE`] stamp says it was up, before it uses a mapping it persisted (not ready
//! meanwhile, at most [`BOOT_GRACE`]). When no answering peer's log reaches back that far
//! (down longer than [`KEEP`], or the peers restarted since), the node does not trust a mapping
//! it persisted before: it resolves each key again once (its cached blocks, keyed by ETag,
//! still serve when the version is the same). One node alone (no fleet) missed nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use floe_core::away::{wall_ms, Away};
use floe_core::fleet::{Fleet, PeerCall};
use floe_core::recent::DEPARTED_WAIT;
use serde::{Deserialize, Serialize};

use crate::cache::BlockCache;
use crate::filter::BlockFilter;
use crate::forget::{Forget, SERVICE, TELL_WAIT};

/// How long a node keeps the forgets it sent or applied: as long as a sender retries one.
pub const KEEP: Duration = crate::forget::RETRY_FOR;
/// Most forgets kept; past this the oldest go (and the log no longer reaches back as far).
const MAX_KEPT: usize = 1 << 16;
/// Asked from a little before the node left: clocks of two nodes differ by this much at most,
/// and a forget sent just before a freeze may not have been applied.
const SLACK_MS: u64 = 5_000;
/// The file (in the folder of the metadata store's disk tier, beside it: foyer owns the tier's
/// own folder) the node stamps with the time every second while it runs.
pub const ALIVE_FILE: &str = "floe-alive.ms";
/// The path of the ask below the service.
const MISSED_PATH: &str = "/missed";

/// The forgets this node sent or applied lately.
pub struct ForgetLog {
    kept: Mutex<VecDeque<(u64, Forget)>>,
    /// Wall-clock ms from which the log is whole (this process's start; later once
    /// [`MAX_KEPT`] pushed the oldest out).
    whole_from: AtomicU64,
}

impl Default for ForgetLog {
    fn default() -> Self {
        Self {
            kept: Mutex::default(),
            whole_from: AtomicU64::new(wall_ms()),
        }
    }
}

impl ForgetLog {
    /// Keeps `forget`, sent or applied now.
    pub fn record(&self, forget: &Forget) {
        self.record_at(wall_ms(), forget);
    }

    fn record_at(&self, now: u64, forget: &Forget) {
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let oldest = now.saturating_sub(KEEP.as_millis() as u64);
        while kept.front().is_some_and(|(at, _)| *at < oldest) || kept.len() >= MAX_KEPT {
            if let Some((at, _)) = kept.pop_front() {
                self.whole_from.fetch_max(at + 1, Ordering::SeqCst);
            }
        }
        kept.push_back((now, forget.clone()));
    }

    /// The forgets kept from `since` (wall-clock ms) on, and whether the log is whole that far.
    pub fn since(&self, since: u64) -> Missed {
        let forgets = self
            .kept
            .lock()
            .map(|k| {
                k.iter()
                    .filter(|(at, _)| *at >= since)
                    .map(|(_, f)| f.clone())
                    .collect()
            })
            .unwrap_or_default();
        let oldest = wall_ms().saturating_sub(KEEP.as_millis() as u64);
        let whole_from = self.whole_from.load(Ordering::SeqCst).max(oldest);
        Missed {
            whole: since >= whole_from,
            forgets,
        }
    }
}

/// A peer's answer to "what did I miss since T?".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Missed {
    /// The peer's log reaches back to T: these are all the forgets it knows of since.
    pub whole: bool,
    /// The forgets.
    pub forgets: Vec<Forget>,
}

impl Missed {
    /// The ask for the forgets since `since` (wall-clock ms).
    pub fn ask(since: u64) -> PeerCall {
        PeerCall {
            method: "GET",
            path: format!("{MISSED_PATH}?since={since}"),
            body: bytes::Bytes::new(),
        }
    }

    /// The `since` of an ask, if `call` is one.
    pub fn asked(call: &PeerCall) -> Option<u64> {
        let since = call
            .path
            .strip_prefix(MISSED_PATH)?
            .strip_prefix("?since=")?;
        (call.method == "GET").then_some(())?;
        since.parse().ok()
    }
}

/// How long a restarted node waits for a peer to answer what it missed before it gives up on
/// its persisted mappings (and becomes ready): longer than gossip takes to find the seeds.
pub const BOOT_GRACE: Duration = Duration::from_secs(10);

/// What the peers answered to "what did I miss?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// The node has no peers and expects none: nobody wrote through another node.
    Alone,
    /// No peer answered (none in the view yet, or none reachable).
    Nobody,
    /// One answering peer's log reached back far enough: the node heard everything.
    Whole,
    /// Peers answered, none remembering that far back.
    Partial,
}

/// Whether this node must hear what it missed before it answers a read.
pub struct Returning {
    /// The absences of this process handled so far ([`floe_core::away`]).
    away_mark: AtomicU64,
    /// Restarted over mappings an earlier run persisted: wall-clock ms of its last stamp
    /// (0 when it left none). Until the peers answered, no persisted mapping is used and the
    /// node is not ready.
    boot_since: u64,
    /// The metadata tier may hold mappings of an earlier run.
    persisted: bool,
    /// Armed when the node joins a fleet ([`Returning::in_fleet`]): one node alone missed
    /// nothing.
    armed: std::sync::Once,
    boot_pending: AtomicBool,
    booted: std::time::Instant,
    /// A mapping persisted before this start is not trusted (see the module doc).
    distrust_persisted: AtomicBool,
    /// One catch-up at a time; the others wait for it.
    flight: tokio::sync::Mutex<()>,
}

impl Returning {
    /// The state of a cache opened now; `stamp`: the [`ALIVE_FILE`] found on disk;
    /// `persisted`: the metadata tier may hold mappings of an earlier run (a fresh cache has
    /// nothing it could have missed).
    pub fn at_boot(stamp: Option<u64>, persisted: bool) -> Self {
        Self {
            away_mark: AtomicU64::new(Away::global().mark()),
            boot_since: stamp.unwrap_or(0),
            persisted,
            armed: std::sync::Once::new(),
            boot_pending: AtomicBool::new(false),
            booted: std::time::Instant::now(),
            distrust_persisted: AtomicBool::new(false),
            flight: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether persisted mappings may be used: not while a restarted node has not heard
    /// what it missed, nor after no peer could tell it.
    pub fn trusts_persisted(&self) -> bool {
        !self.boot_pending.load(Ordering::Acquire)
            && !self.distrust_persisted.load(Ordering::Relaxed)
    }

    /// Why the node is not ready yet, if it is a restarted one that has not heard.
    pub fn not_ready(&self) -> Option<String> {
        self.boot_pending
            .load(Ordering::Acquire)
            .then(|| "asking the fleet which keys changed while this node was down".to_owned())
    }

    /// The node is in a fleet: if it restarted over persisted mappings, it must hear what it
    /// missed before it uses them (called before it serves; only the first call counts).
    pub(crate) fn in_fleet(&self) {
        self.armed
            .call_once(|| self.boot_pending.store(self.persisted, Ordering::Release));
    }

    /// When this process went away (frozen) since the node last asked, if it did.
    fn away(&self) -> Option<u64> {
        Away::global().away_since_now(self.away_mark.load(Ordering::SeqCst))
    }
}

/// What a filter needs to catch up: the cache, the stages (to apply forgets to every route)
/// and the fleet.
#[derive(Clone)]
pub struct CatchUp {
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) routes: Weak<RwLock<std::collections::HashMap<String, Arc<BlockFilter>>>>,
    pub(crate) fleet: Arc<dyn Fleet>,
}

impl CatchUp {
    /// Before a read is answered: when this process was away (frozen), asks its peers what
    /// it missed and applies it (once; concurrent reads wait for that one). Cheap otherwise:
    /// two atomic loads and a clock read. (A restart is [`CatchUp::at_boot`]'s.)
    pub async fn before_read(&self) {
        let returning = &self.cache.returning;
        if returning.away().is_none() {
            return;
        }
        let _one = returning.flight.lock().await;
        let mark = Away::global().mark();
        let Some(since) = returning.away() else {
            return;
        };
        match self.pull(since.saturating_sub(SLACK_MS)).await {
            Heard::Alone | Heard::Whole => {}
            // Nobody could say what changed meanwhile: nothing resolved before is trusted.
            Heard::Nobody | Heard::Partial => self.forget_everything(since),
        }
        returning.away_mark.store(mark, Ordering::SeqCst);
    }

    /// Drops every mapping of every route (memory; persisted ones are not trusted after a
    /// drop of everything): each key is resolved again once, its blocks (keyed by ETag) still
    /// serve when the version is the same.
    fn forget_everything(&self, since: u64) {
        let Some(routes) = self.routes.upgrade() else {
            return;
        };
        let dropped: usize = routes
            .read()
            .map(|r| r.values().map(|f| f.invalidate_prefix("")).sum())
            .unwrap_or(0);
        tracing::warn!(
            since_ms = since,
            dropped,
            "no peer could say which keys changed while this node was away: every mapping is resolved again"
        );
    }

    /// Notes the view's members now, so a node back from a freeze (its view emptied by the
    /// silence) still knows whom to ask. The alive worker calls this every second.
    pub fn note_members(&self) {
        self.cache.recipients.with(self.fleet.others());
    }

    /// A restarted node asks its peers what changed since its last stamp (the alive worker
    /// calls this each second until it is done): done once a peer answered, or after
    /// [`BOOT_GRACE`] with none; when no answer reached back that far, its persisted
    /// mappings are not used.
    pub async fn at_boot(&self) {
        let returning = &self.cache.returning;
        if !returning.boot_pending.load(Ordering::Acquire) {
            return;
        }
        let _one = returning.flight.lock().await;
        let since = returning.boot_since;
        let trust = match self.pull(since.saturating_sub(SLACK_MS)).await {
            Heard::Alone | Heard::Whole => true,
            Heard::Partial => false,
            Heard::Nobody if returning.booted.elapsed() >= BOOT_GRACE => false,
            Heard::Nobody => return,
        };
        if !trust {
            tracing::warn!(since_ms = since, "no peer remembers every key forgotten since this node last ran: its persisted mappings are resolved again");
            returning.distrust_persisted.store(true, Ordering::Relaxed);
        }
        returning.boot_pending.store(false, Ordering::Release);
    }

    /// Asks every peer for the forgets since `since` and applies them; what they answered.
    async fn pull(&self, since: u64) -> Heard {
        // The view and the members seen lately: a node back from a freeze often finds its
        // own view empty (it heard no gossip while frozen), yet its peers are all there.
        let seen = self.cache.recipients.with(self.fleet.others());
        let live = seen.live.into_iter().map(|p| (p, TELL_WAIT));
        let others: Vec<_> = live
            .chain(seen.departed.into_iter().map(|p| (p, DEPARTED_WAIT)))
            .collect();
        // A node told of no peers has nobody who could have written meanwhile.
        let alone = others.is_empty() && !self.fleet.expects_peers();
        let asks = others.into_iter().map(|(peer, wait)| {
            let fleet = self.fleet.clone();
            async move {
                let reply = fleet.call(&peer, SERVICE, Missed::ask(since), wait).await;
                let reply = reply.ok().filter(|r| r.status == 200)?;
                serde_json::from_slice::<Missed>(&reply.body).ok()
            }
        });
        let answers: Vec<Missed> = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        let routes = self.routes.upgrade();
        let mut applied = 0;
        for forget in answers.iter().flat_map(|m| &m.forgets) {
            if let Some(routes) = &routes {
                // As a forget received (`service.rs`): a staged write the fleet retired
                // meanwhile goes too, or the next read resolves to it (and a node back from
                // away is the one most likely to hold such a write).
                applied += forget.apply_and_retire(&self.cache, routes).await;
            }
        }
        tracing::info!(
            peers = answers.len(),
            applied,
            since_ms = since,
            "asked the fleet what this node missed while away"
        );
        match answers.is_empty() {
            true if alone => Heard::Alone,
            true => Heard::Nobody,
            false if answers.iter().any(|m| m.whole) => Heard::Whole,
            false => Heard::Partial,
        }
    }
}

/// The "floe-cache-alive" worker: every second, notes the fleet's members
/// ([`CatchUp::note_members`]) and, with a disk tier, stamps [`ALIVE_FILE`] once the node
/// heard what it missed since its last run (it asks at once rather than at its first read).
pub struct Alive {
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) routes: Arc<RwLock<std::collections::HashMap<String, Arc<BlockFilter>>>>,
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Alive {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let dir = self.cache.settings.meta.disk_dir.clone();
        loop {
            let catch_up = self
                .routes
                .read()
                .ok()
                .and_then(|r| r.values().find_map(|f| f.catch_up.clone()));
            if let Some(c) = catch_up {
                c.note_members();
                c.at_boot().await;
            }
            let stamps = self.cache.settings.meta.disk_bytes > 0;
            if stamps && !self.cache.returning.boot_pending.load(Ordering::Acquire) {
                let dir = dir.clone();
                let written = tokio::task::spawn_blocking(move || write_stamp(&dir)).await;
                if let Ok(Err(e)) = written {
                    tracing::warn!(error = %e, "the cache's alive stamp could not be written");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Where the [`ALIVE_FILE`] stamp of a metadata tier in `tier` goes.
fn stamp_path(tier: &std::path::Path) -> std::path::PathBuf {
    tier.parent().unwrap_or(tier).join(ALIVE_FILE)
}

/// Where the members this node saw lately are kept across restarts, beside the
/// [`ALIVE_FILE`] stamp of the metadata tier in `tier` (see [`floe_core::recent`]).
pub fn members_path(tier: &std::path::Path) -> std::path::PathBuf {
    tier.parent().unwrap_or(tier).join("floe-members")
}

/// Reads the [`ALIVE_FILE`] stamp of the metadata tier in `tier`.
pub fn read_stamp(tier: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(stamp_path(tier)).ok()?;
    text.trim().parse().ok()
}

/// Writes the [`ALIVE_FILE`] stamp of the metadata tier in `tier` (now).
pub fn write_stamp(tier: &std::path::Path) -> std::io::Result<()> {
    std::fs::write(stamp_path(tier), wall_ms().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forget(key: &str) -> Forget {
        Forget::keys("lake", vec![key.into()])
    }

    #[test]
    fn the_log_answers_what_came_since_and_says_how_far_it_reaches() {
        let log = ForgetLog::default();
        let start = log.whole_from.load(Ordering::SeqCst);
        log.record_at(start + 10, &forget("a"));
        log.record_at(start + 20, &forget("b"));
        let m = log.since(start + 15);
        assert!(m.whole);
        assert_eq!(m.forgets, vec![forget("b")]);
        // Before this process started: not whole (it may have missed some).
        assert!(!log.since(start - 1).whole);
    }

    #[test]
    fn an_ask_round_trips_and_others_are_not_asks() {
        assert_eq!(Missed::asked(&Missed::ask(1234)), Some(1234));
        let mut post = Missed::ask(5);
        post.method = "POST";
        assert_eq!(Missed::asked(&post), None);
        assert_eq!(Missed::asked(&forget("x").call()), None);
        let m = Missed {
            whole: true,
            forgets: vec![forget("k")],
        };
        let text = serde_json::to_vec(&m).unwrap();
        assert_eq!(serde_json::from_slice::<Missed>(&text).unwrap(), m);
        assert!(serde_json::from_slice::<Missed>(br#"{"whole":true,"forgets":[],"x":1}"#).is_err());
    }
}
