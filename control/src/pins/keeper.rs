//! The `keeper` worker: every poll it reads each node's `/stats`. A node whose `boot` changed
//! (restarted) or that it has not seen before (a new fleet member) is sent again what lives only
//! in a proxy's DRAM: the catalog's classification of every table's files and their column
//! chunks. Then every node gets each bucket's pinned files when they differ from what it was
//! last told (a compaction's commit changes them), and when a node holds less than its pins
//! need (after a restart: the kept store is DRAM only) the pinned files are warmed into their
//! owners' kept stores.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::mapper::FileKey;
use crate::node::{NodeClient, NodeError, Span, Store};
use crate::pins::{body, current, KeptFile, PinPhase, Sets};
use crate::state::Control;
use floe_core::worker::{pause, Activity, Handle, Shutdown};

/// What the keeper last told each node, by admin URL.
#[derive(Default)]
pub struct Told {
    nodes: HashMap<String, NodeTold>,
}

#[derive(Default, Clone)]
struct NodeTold {
    boot: Option<u64>,
    sets: Sets,
}

/// A node refused a pinned set.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The bucket whose set was refused.
    pub bucket: String,
    /// The node's answer (it names its bound).
    pub why: String,
}

/// Runs the keeper until shutdown, one round per catalog poll.
pub async fn run(ctl: Arc<Control>, h: Handle, mut stop: Shutdown) {
    loop {
        h.set(Activity::Working, "");
        let summary = round(&ctl).await;
        h.done();
        h.set(Activity::Idle, summary);
        if pause(&mut stop, ctl.settings.poll).await {
            return;
        }
    }
}

/// One round; returns what the board shows.
pub async fn round(ctl: &Arc<Control>) -> String {
    let pins = ctl.pins.pins();
    let (sets, counts) = current(ctl, &pins);
    let (refused, short) = {
        let mut told = ctl.told.lock().await;
        let nodes = ctl.nodes.current();
        let mut fresh = Vec::new();
        for n in nodes.iter() {
            if resync(ctl, &mut told, n).await {
                fresh.push(n.clone());
            }
        }
        let refused = send_all(&mut told, &nodes, &sets).await;
        let mut short = fresh;
        for n in nodes.iter() {
            if holds_less(n, &sets).await && !short.iter().any(|s| s.url() == n.url()) {
                short.push(n.clone());
            }
        }
        (refused, short)
    };
    let live = ctl.live_files();
    for (pin, (files, bytes)) in pins.iter().zip(counts) {
        let why = refused
            .iter()
            .find(|r| touches(&live, &r.bucket, pin))
            .map(|r| r.why.clone());
        ctl.pins.update(pin, |v| {
            v.files = files;
            v.bytes = bytes;
            (v.phase, v.note) = match (&why, files) {
                (Some(w), _) => (PinPhase::Refused, w.clone()),
                (None, 0) => (PinPhase::Pending, String::new()),
                (None, _) if !short.is_empty() => (PinPhase::Warming, String::new()),
                (None, _) => (PinPhase::Kept, String::new()),
            };
        });
    }
    if !short.is_empty() {
        let all: Vec<(FileKey, KeptFile)> = sets
            .iter()
            .flat_map(|(b, keys)| {
                keys.iter()
                    .map(move |(k, kept)| ((b.clone(), k.clone()), kept.clone()))
            })
            .collect();
        // Through each node that lacks them: it fills the blocks it owns itself (a peer that
        // kept them while it was away would answer a warm through it from its own copy).
        for n in &short {
            warm_through(ctl, n, &all).await;
        }
    }
    format!("{} pins, {} buckets", pins.len(), sets.len())
}

/// Whether `pin` has files in `bucket` (a refusal there is its refusal).
fn touches(
    live: &BTreeMap<String, Arc<Vec<crate::warmer::LiveFile>>>,
    bucket: &str,
    pin: &crate::pins::Pin,
) -> bool {
    live.get(&pin.table).is_some_and(|l| {
        l.iter()
            .any(|f| f.loc.0 == bucket && pin.matches(&f.partition))
    })
}

/// Reads `n`'s boot; a restarted or new node gets every table's classification and chunk
/// hints again, and is taken to hold no pins. Returns whether it must be warmed.
async fn resync(ctl: &Control, told: &mut Told, n: &NodeClient) -> bool {
    let boot = match n.stats().await {
        Ok(s) => s.boot,
        Err(e) => {
            tracing::debug!(node = n.url(), error = %e, "node not read");
            return false;
        }
    };
    let entry = told.nodes.entry(n.url().to_owned()).or_default();
    if entry.boot == Some(boot) {
        return false;
    }
    tracing::info!(
        node = n.url(),
        boot,
        "node restarted or new: sending classifications, chunk hints and pins"
    );
    let published: Vec<(String, Arc<crate::state::Published>)> = ctl
        .published
        .lock()
        .map(|p| p.iter().map(|(t, c)| (t.clone(), c.clone())).collect())
        .unwrap_or_default();
    let map = ctl.files.load();
    for (table, p) in &published {
        crate::warmer::classify_on(n, &p.metadata, Store::Metadata).await;
        let data: Vec<FileKey> = p.live.iter().map(|f| f.loc.clone()).collect();
        crate::warmer::classify_on(n, &data, Store::Data).await;
        let files: Vec<(FileKey, crate::mapper::FileInfo)> = data
            .iter()
            .filter_map(|k| {
                map.get(k)
                    .map(|i| (k.clone(), crate::mapper::FileInfo::clone(i)))
            })
            .collect();
        crate::hints::publish_to(n, table, &crate::hints::bodies(table, &files)).await;
    }
    entry.boot = Some(boot);
    entry.sets.clear();
    true
}

/// Sends every bucket's set that differs from what each node was last told (an emptied
/// bucket gets an empty set once). Returns the refusals; a refused node keeps its old set.
async fn send_all(told: &mut Told, nodes: &[NodeClient], sets: &Sets) -> Vec<Refusal> {
    let mut refused = Vec::new();
    for n in nodes {
        let entry = told.nodes.entry(n.url().to_owned()).or_default();
        let buckets: Vec<String> = sets.keys().chain(entry.sets.keys()).cloned().collect();
        for bucket in buckets {
            let want = sets.get(&bucket);
            if entry.sets.get(&bucket) == want {
                continue;
            }
            match n.kept(&bucket, &body(want)).await {
                Ok(_) => match want {
                    Some(s) => drop(entry.sets.insert(bucket, s.clone())),
                    None => drop(entry.sets.remove(&bucket)),
                },
                Err(NodeError::Status {
                    status: 409, body, ..
                }) => refused.push(Refusal {
                    bucket,
                    why: format!("{}: {}", n.url(), reason(&body)),
                }),
                Err(e) => tracing::warn!(node = n.url(), bucket, error = %e, "pins not sent"),
            }
        }
    }
    refused
}

/// Sends `sets` to every node, all or nothing: when one refuses, the nodes already changed get
/// their old sets back and the refusal is returned (a new pin past a bound is never kept in
/// part).
pub async fn send_or_refuse(
    told: &mut Told,
    nodes: &[NodeClient],
    sets: &Sets,
) -> Result<(), Refusal> {
    let before: BTreeMap<String, NodeTold> = nodes
        .iter()
        .map(|n| {
            let t = told.nodes.get(n.url()).cloned().unwrap_or_default();
            (n.url().to_owned(), t)
        })
        .collect();
    let refused = send_all(told, nodes, sets).await;
    let Some(first) = refused.into_iter().next() else {
        return Ok(());
    };
    for n in nodes {
        let old = before
            .get(n.url())
            .map(|t| t.sets.clone())
            .unwrap_or_default();
        send_all(told, std::slice::from_ref(n), &old).await;
    }
    Err(first)
}

/// The error text of a node's XML or JSON answer, or the answer.
fn reason(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned())
}

/// Whether `n` holds less than what every route's pins need there.
async fn holds_less(n: &NodeClient, sets: &Sets) -> bool {
    let Some(bucket) = sets.keys().next() else {
        return false;
    };
    match n.kept_doc(bucket).await {
        Ok(d) => d.held_bytes < d.pinned_bytes,
        Err(_) => false,
    }
}

/// Warms what is pinned of `files` (whole, or their pinned ranges) into their owners (through
/// the first node, which routes each block to its owner), under the warm rate; failures are
/// logged.
pub async fn warm(ctl: &Control, files: &[(FileKey, KeptFile)]) {
    let nodes = ctl.nodes.current();
    if let Some(n) = ctl.placement.reader(&nodes) {
        warm_through(ctl, n, files).await;
    }
}

/// Warms what is pinned of `files` through `n` (each block to its owner).
async fn warm_through(ctl: &Control, n: &NodeClient, files: &[(FileKey, KeptFile)]) {
    for ((bucket, key), kept) in files {
        let spans: Vec<Span> = match &kept.ranges {
            None => vec![Span::Whole],
            Some(r) => r
                .chunks_exact(2)
                .filter(|c| c[1] > 0)
                .map(|c| Span::Range(c[0], c[0] + c[1] - 1))
                .collect(),
        };
        for span in spans {
            match n.warm_owners(bucket, key, span).await {
                Ok(bytes) => ctl.rate.acquire(bytes).await,
                Err(e) => tracing::warn!(node = n.url(), key, error = %e, "pinned file not warmed"),
            }
        }
    }
}
