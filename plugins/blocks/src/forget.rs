//! Telling the fleet that keys changed. A write through any node (PUT, copy, multipart
//! completion, delete) drops the keys' mappings on every live member before the client hears
//! the write's outcome, so no node's next read is answered from the version it replaced: a
//! non-owner asks the key's owner, and the owner would otherwise answer from its own mapping.
//!
//! The message is [`Forget`], JSON on the fleet's authenticated peer transport, mounted as the
//! `blocks` service (`POST /v2/x/blocks/forget`). A member that does not answer within
//! [`TELL_WAIT`] is told again in the background, first after [`RETRY_EVERY`] and then less
//! often, for up to [`RETRY_FOR`] (a node restarting meanwhile hears it within
//! [`RETRY_MAX_WAIT`] of its peer API coming up).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use floe_core::fleet::{Fleet, PeerCall, PeerRef};
use floe_core::recent::{RecentMembers, Seen, DEPARTED_WAIT};
use serde::{Deserialize, Serialize};

use crate::asks::WireError;
use crate::cache::BlockCache;
use crate::filter::BlockFilter;

/// The service name the block cache mounts on the peer API.
pub const SERVICE: &str = "blocks";
/// The path of [`Forget`] below the service.
const FORGET_PATH: &str = "/forget";
/// How long a write waits for a member to confirm: a member slower than this (down, cut off)
/// is retried in the background while the write is answered, and may serve the replaced
/// version until a retry reaches it. Two seconds: a member that is alive but starved (a
/// loaded 2-core host) confirms within it; a dead one costs each write this wait once (the
/// second round does not wait for it again) until gossip drops it from the view.
pub const TELL_WAIT: Duration = Duration::from_millis(2000);
/// The first pause before a member whose call failed at once is told again within
/// [`TELL_WAIT`]; it doubles up to [`AGAIN_MAX`].
const AGAIN_FIRST: Duration = Duration::from_millis(5);
/// The longest pause between two tellings within [`TELL_WAIT`].
const AGAIN_MAX: Duration = Duration::from_millis(200);
/// The first wait before a retry to a member that did not confirm; it doubles up to
/// [`RETRY_MAX_WAIT`] (a member down for long is not asked four times a second).
pub const RETRY_EVERY: Duration = Duration::from_millis(250);
/// The longest wait between retries.
pub const RETRY_MAX_WAIT: Duration = Duration::from_secs(5);
/// How long a member that does not confirm is retried: longer than gossip takes to drop a dead
/// member (it is then no longer asked by anyone), and than a restart takes.
pub const RETRY_FOR: Duration = Duration::from_secs(600);
/// Most retries in flight at once; past this, a failed tell is logged and counted only.
const MAX_RETRYING: usize = 4096;

/// "These keys of this bucket changed: drop what you resolved them to."
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forget {
    /// The bucket.
    pub bucket: String,
    /// The keys (decoded).
    pub keys: Vec<String>,
    /// Every key of the bucket (a lifecycle rule changed what each HEAD answers). Left out
    /// when false, so members of an earlier release still read the message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every: bool,
}

impl Forget {
    /// The call that carries it.
    pub fn call(&self) -> PeerCall {
        PeerCall {
            method: "POST",
            path: FORGET_PATH.to_owned(),
            body: serde_json::to_vec(self).unwrap_or_default().into(),
        }
    }

    /// A forget of `keys` of `bucket`.
    pub fn keys(bucket: &str, keys: Vec<String>) -> Self {
        Self {
            bucket: bucket.to_owned(),
            keys,
            every: false,
        }
    }

    /// Applies it on this node (memory and persisted), whether or not a stage for the
    /// bucket was built here yet.
    pub(crate) fn apply_here(
        &self,
        cache: &BlockCache,
        routes: &RwLock<HashMap<String, Arc<BlockFilter>>>,
    ) -> usize {
        if self.every {
            // A persisted mapping of a route dropped whole is not trusted again.
            let route = routes
                .read()
                .ok()
                .and_then(|r| r.get(&self.bucket).cloned());
            return route.map_or(0, |f| f.invalidate_prefix(""));
        }
        for key in &self.keys {
            forget_here(cache, routes, &self.bucket, key);
        }
        self.keys.len()
    }

    /// Applies it here as a write elsewhere needs: drops the keys' mappings, then retires a
    /// staged write of them this node still holds that the fleet retired
    /// ([`floe_core::OriginReader::changed_elsewhere`]), then drops the mappings again: a read
    /// between the two resolved to that staged write (it comes first,
    /// [`floe_core::OriginReader::local_head`]) and must not keep what it found. Used for a
    /// forget received and for one a node back from away learns it missed; returns how many
    /// keys.
    pub(crate) async fn apply_and_retire(
        &self,
        cache: &BlockCache,
        routes: &RwLock<HashMap<String, Arc<BlockFilter>>>,
    ) -> usize {
        let applied = self.apply_here(cache, routes);
        if self.every {
            return applied;
        }
        let route = routes
            .read()
            .ok()
            .and_then(|r| r.get(&self.bucket).cloned());
        let bucket = floe_core::BucketName::parse(&self.bucket).ok();
        if let (Some(route), Some(bucket)) = (route, bucket) {
            route.origin.changed_elsewhere(&bucket, &self.keys).await;
            self.apply_here(cache, routes);
        }
        applied
    }

    /// Reads one from a call; `Err` names what is wrong.
    pub fn decode(call: &PeerCall) -> Result<Self, WireError> {
        if call.method != "POST" || call.path != FORGET_PATH {
            return Err(WireError(format!(
                "no such call: {} {}",
                call.method, call.path
            )));
        }
        serde_json::from_slice(&call.body).map_err(|e| WireError(format!("bad forget body: {e}")))
    }
}

/// Drops `key`'s mapping of `bucket` on this node (memory and persisted), whether or not a
/// stage for the bucket was built here yet.
pub(crate) fn forget_here(
    cache: &BlockCache,
    routes: &RwLock<HashMap<String, Arc<BlockFilter>>>,
    bucket: &str,
    key: &str,
) {
    let route = routes.read().ok().and_then(|r| r.get(bucket).cloned());
    match route {
        Some(f) => f.invalidate(key),
        // No stage built here for the bucket yet (a pattern route): only the persisted
        // mapping can be there.
        None => cache.forget_mapping(&Arc::from(bucket), &Arc::from(key)),
    }
}

static RETRYING: AtomicUsize = AtomicUsize::new(0);

/// Tells every other live member of `fleet`; returns once each confirmed or [`TELL_WAIT`]
/// passed. Members that did not confirm are retried in the background. Returns the members
/// that did not confirm in time.
///
/// One round is not enough for a write: a member told early may resolve the key again by
/// asking one not told yet, and keep what it answers. [`BlockFilter`] runs two rounds: once
/// the first is done, no member holds or resolves the replaced version any more, and the
/// second drops whatever was taken from a late member in between. A member that missed the
/// first round is not waited for again in the second (`skip`): it is being retried already,
/// and one late drop is all it needs once every other member dropped.
///
/// `recent` adds the members that left the view lately (see [`floe_core::recent`]), each
/// waited for [`DEPARTED_WAIT`] at most: a member restarting is back serving reads before
/// every view lists it again.
pub async fn tell_fleet(
    fleet: &Arc<dyn Fleet>,
    recent: &RecentMembers,
    forget: &Forget,
    skip: &[Arc<str>],
) -> Vec<Arc<str>> {
    let mut seen = recent.with(fleet.others());
    seen.live.retain(|p| !skip.contains(&p.id));
    seen.departed.retain(|p| !skip.contains(&p.id));
    if (seen.live.is_empty() && seen.departed.is_empty())
        || (forget.keys.is_empty() && !forget.every)
    {
        return Vec::new();
    }
    tell_round(fleet, &forget.call(), seen).await
}

async fn tell_round(fleet: &Arc<dyn Fleet>, call: &PeerCall, seen: Seen) -> Vec<Arc<str>> {
    let live = seen.live.into_iter().map(|p| (p, TELL_WAIT, true));
    let departed = seen.departed.into_iter().map(|p| (p, DEPARTED_WAIT, false));
    let asks = live.chain(departed).map(|(peer, wait, in_view)| {
        let (fleet, call) = (fleet.clone(), call.clone());
        async move {
            let ok = tell_one(&fleet, &peer, call.clone(), wait).await;
            if !ok && in_view {
                // The one window in which a member in the view may answer the replaced
                // version (the attempts within the wait log at debug level only).
                tracing::warn!(peer = %peer.id, "a member did not confirm a forget within the wait: the write is answered; it is told again in the background");
            }
            (!ok).then_some((peer, call))
        }
    });
    let missed: Vec<(PeerRef, PeerCall)> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    for (peer, call) in &missed {
        retry_later(fleet.clone(), peer.clone(), call.clone());
    }
    missed
        .into_iter()
        .map(|(peer, _)| peer.id.clone())
        .collect()
}

/// Tells `peer` until it confirms or `wait` passed: a call that fails at once (a pooled
/// connection the member had closed, a refused connect while it restarts) is sent again after
/// a short pause, so only a member that stays silent for the whole wait is left to the
/// background retries (and serves the replaced version until one reaches it).
async fn tell_one(fleet: &Arc<dyn Fleet>, peer: &PeerRef, call: PeerCall, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = AGAIN_FIRST;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        match fleet.call(peer, SERVICE, call.clone(), left).await {
            Ok(r) if r.status == 204 => return true,
            Ok(r) if r.status < 500 => {
                tracing::warn!(peer = %peer.id, status = r.status, "a member refused a forget");
                // It answered: sending the same message again cannot help.
                return true;
            }
            Ok(r) => {
                tracing::debug!(peer = %peer.id, status = r.status, "a member failed a forget")
            }
            Err(e) => {
                tracing::debug!(peer = %peer.id, error = %e, "a member did not confirm a forget")
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(AGAIN_MAX);
    }
}

fn retry_later(fleet: Arc<dyn Fleet>, peer: PeerRef, call: PeerCall) {
    if RETRYING.fetch_add(1, Ordering::AcqRel) >= MAX_RETRYING {
        RETRYING.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!(peer = %peer.id, "too many forgets being retried: one dropped");
        return;
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut wait = RETRY_EVERY;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RETRY_MAX_WAIT);
            if tell_one(&fleet, &peer, call.clone(), TELL_WAIT).await {
                break;
            }
        }
        RETRYING.fetch_sub(1, Ordering::AcqRel);
    });
}

#[cfg(test)]
#[path = "forget_tests.rs"]
mod tests;
