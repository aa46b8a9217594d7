//! An in-memory fleet: each member's peer calls go straight to another member's
//! [`Node::serve`], unless it is down or a scripted fault drops the call (before it arrives,
//! or after it was served: the answer is lost and the caller sees a failure for work done).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use floe_core::fleet::{
    Membership, Peer, PeerCall, PeerError, PeerRef, PeerReply, Placement, Transport,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::node::Node;

/// A member's state.
struct Member {
    peer: PeerRef,
    node: Option<Arc<Node>>,
}

/// Drops of peer calls: each call is dropped before it arrives with `before` per mille, and
/// its answer lost after it was served with `after` per mille; never more than
/// [`MAX_STREAK`] times in a row for one call to one node (a link that loses every retry is a
/// partition, which this bed does not model: see the module's docs).
pub struct CallFaults {
    rng: StdRng,
    /// Per mille of calls never delivered.
    pub before: u32,
    /// Per mille of calls served whose answer is lost.
    pub after: u32,
    /// Calls dropped so far.
    pub dropped: u64,
    /// Nodes that die at the next call they get: before serving it (`false`) or after (`true`:
    /// what it did is on its disk, the answer never leaves).
    crash_at_next: std::collections::HashMap<String, bool>,
    /// Calls to this path are lost, every one to every node: before they arrive (`false`)
    /// or after they were served (`true`: the answer is lost).
    dropped_path: Option<(String, bool)>,
    /// Nodes that die as they send a call to a path (kill -9 mid-request): the path, and how
    /// many such calls still leave first.
    crash_sending: std::collections::HashMap<String, (String, usize)>,
    /// Members that died as they sent a call, until started again.
    died_sending: std::collections::HashSet<String>,
    /// Members frozen (SIGSTOP): still in every view, answering nothing.
    paused: std::collections::HashSet<String>,
    /// Drops in a row by (node, method, path).
    streaks: std::collections::HashMap<(String, &'static str, String), u32>,
}

/// The most drops in a row of one call to one node.
pub const MAX_STREAK: u32 = 2;

/// The fleet's members and faults, shared by every member's [`MemFleet`].
pub struct Registry {
    members: RwLock<BTreeMap<String, Member>>,
    faults: Mutex<CallFaults>,
    /// Members out of every view that still run and answer: a node thawed after a freeze that
    /// its peers' failure detectors counted as a departure, before gossip lists it again.
    hidden: Mutex<std::collections::HashSet<String>>,
    /// Told when a member dies as it sends a call (see [`Registry::crash_sending`]).
    pub crashed: tokio::sync::Notify,
    /// Calls being served (see [`Registry::served`]).
    serving: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Registry {
    /// A fleet of `ids`, none running yet; call faults drawn from `seed`.
    pub fn new(ids: &[String], seed: u64) -> Arc<Self> {
        let members = ids
            .iter()
            .map(|id| {
                let peer = Arc::new(Peer {
                    id: Arc::from(id.as_str()),
                    addr: Arc::from(format!("mem://{id}").as_str()),
                });
                (id.clone(), Member { peer, node: None })
            })
            .collect();
        Arc::new(Self {
            members: RwLock::new(members),
            faults: Mutex::new(CallFaults {
                rng: StdRng::seed_from_u64(seed),
                before: 0,
                after: 0,
                dropped: 0,
                crash_at_next: Default::default(),
                crash_sending: Default::default(),
                died_sending: Default::default(),
                dropped_path: None,
                paused: Default::default(),
                streaks: Default::default(),
            }),
            hidden: Default::default(),
            crashed: tokio::sync::Notify::new(),
            serving: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }

    /// Runs `node` as member `id` (it answers calls from now on).
    pub fn up(&self, id: &str, node: Arc<Node>) {
        self.faults.lock().unwrap().died_sending.remove(id);
        if let Some(m) = self.members.write().unwrap().get_mut(id) {
            m.node = Some(node);
        }
    }

    /// Takes member `id` down (killed: its calls fail, it is out of every view).
    pub fn down(&self, id: &str) {
        if let Some(m) = self.members.write().unwrap().get_mut(id) {
            m.node = None;
        }
    }

    /// Sets the call drop rates (per mille).
    pub fn set_faults(&self, before: u32, after: u32) {
        let mut f = self.faults.lock().unwrap();
        (f.before, f.after) = (before, after);
    }

    /// No more faults: no drops, no crash to come (a paused member stays paused).
    pub fn calm(&self) {
        let mut f = self.faults.lock().unwrap();
        (f.before, f.after) = (0, 0);
        f.crash_at_next.clear();
        f.crash_sending.clear();
        f.dropped_path = None;
    }

    /// Freezes member `id` (`true`) or thaws it.
    pub fn pause(&self, id: &str, paused: bool) {
        let mut f = self.faults.lock().unwrap();
        match paused {
            true => f.paused.insert(id.to_owned()),
            false => f.paused.remove(id),
        };
    }

    /// Takes member `id` out of every view (`true`) while it keeps running and answering, or
    /// lists it again.
    pub fn hide(&self, id: &str, hidden: bool) {
        let mut h = self.hidden.lock().unwrap();
        match hidden {
            true => h.insert(id.to_owned()),
            false => h.remove(id),
        };
    }

    /// Whether member `id` is frozen.
    pub fn is_paused(&self, id: &str) -> bool {
        self.faults.lock().unwrap().paused.contains(id)
    }

    /// Member `id` dies at the next call it gets, before serving it or after.
    pub fn crash_at_next_call(&self, id: &str, after_serving: bool) {
        let mut f = self.faults.lock().unwrap();
        f.crash_at_next.insert(id.to_owned(), after_serving);
    }

    /// Every call to `path` is lost before it arrives, or its answer after it was served
    /// (`after_serving`); `None`: none is.
    pub fn drop_path(&self, path: Option<&str>, after_serving: bool) {
        self.faults.lock().unwrap().dropped_path = path.map(|p| (p.to_owned(), after_serving));
    }

    fn drops_path(&self, call: &PeerCall, after_serving: bool) -> bool {
        let f = self.faults.lock().unwrap();
        f.dropped_path
            .as_ref()
            .is_some_and(|(p, after)| *p == call.path && *after == after_serving)
    }

    /// Waits until no call is being served.
    pub async fn served(&self) {
        let _ = self.serving.subscribe().wait_for(|n| *n == 0).await;
    }

    /// Member `id` dies as it sends a call to `path`, once `first` such calls left.
    pub fn crash_sending(&self, id: &str, path: &str, first: usize) {
        let mut f = self.faults.lock().unwrap();
        f.crash_sending
            .insert(id.to_owned(), (path.to_owned(), first));
    }

    fn dies_sending(&self, id: &str, call: &PeerCall) -> bool {
        let mut f = self.faults.lock().unwrap();
        let Some((path, first)) = f.crash_sending.get_mut(id) else {
            return false;
        };
        if *path != call.path {
            return false;
        }
        if *first > 0 {
            *first -= 1;
            return false;
        }
        f.crash_sending.remove(id);
        f.died_sending.insert(id.to_owned());
        drop(f);
        self.down(id);
        self.crashed.notify_one();
        true
    }

    /// Whether member `id` died as it sent a call and was not started again: the process
    /// is gone, so nothing it was doing sends another call.
    fn is_gone(&self, id: &str) -> bool {
        self.faults.lock().unwrap().died_sending.contains(id)
    }

    /// Whether member `id` runs.
    pub fn is_up(&self, id: &str) -> bool {
        self.node(id).is_some()
    }

    fn crashes(&self, id: &str, after_serving: bool) -> bool {
        let mut f = self.faults.lock().unwrap();
        if f.crash_at_next.get(id) != Some(&after_serving) {
            return false;
        }
        f.crash_at_next.remove(id);
        drop(f);
        self.down(id);
        true
    }

    fn roll(&self, to: &str, call: &PeerCall, per_mille: impl Fn(&CallFaults) -> u32) -> bool {
        let mut f = self.faults.lock().unwrap();
        let p = per_mille(&f);
        let hit = p > 0 && f.rng.random_range(0..1000) < p;
        let streak = f
            .streaks
            .entry((to.to_owned(), call.method, call.path.clone()))
            .or_default();
        let hit = hit && *streak < MAX_STREAK;
        *streak = if hit { *streak + 1 } else { 0 };
        f.dropped += u64::from(hit);
        hit
    }

    fn live(&self) -> Vec<PeerRef> {
        let hidden = self.hidden.lock().unwrap().clone();
        let m = self.members.read().unwrap();
        m.values()
            .filter(|m| m.node.is_some() && !hidden.contains(&*m.peer.id))
            .map(|m| m.peer.clone())
            .collect()
    }

    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.members.read().unwrap().get(id)?.node.clone()
    }
}

/// A call being served, counted until it ends (or is dropped).
struct Serving(Arc<tokio::sync::watch::Sender<usize>>);

impl Serving {
    fn start(count: &Arc<tokio::sync::watch::Sender<usize>>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// One member's view of the fleet.
pub struct MemFleet {
    /// This member's id.
    pub me: Arc<str>,
    /// The fleet.
    pub registry: Arc<Registry>,
}

fn weight(name: &str, id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (name, id).hash(&mut h);
    h.finish()
}

impl Placement for MemFleet {
    fn owner(&self, _: &str, _: &str, _: u64) -> Option<PeerRef> {
        None
    }

    fn ranked(&self, name: &str) -> Vec<PeerRef> {
        let mut live = self.registry.live();
        live.sort_by_key(|p| std::cmp::Reverse(weight(name, &p.id)));
        live
    }
}

#[async_trait]
impl Membership for MemFleet {
    fn node_id(&self) -> &Arc<str> {
        &self.me
    }

    fn member(&self, id: &str) -> Option<PeerRef> {
        self.registry.live().into_iter().find(|p| *p.id == *id)
    }

    fn expects_peers(&self) -> bool {
        true
    }

    fn others(&self) -> Vec<PeerRef> {
        let mut v = self.registry.live();
        v.retain(|p| *p.id != *self.me);
        v
    }
}

#[async_trait]
impl Transport for MemFleet {
    async fn call(
        &self,
        peer: &PeerRef,
        _service: &str,
        call: PeerCall,
        _wait: Duration,
    ) -> Result<PeerReply, PeerError> {
        // A dead process sends nothing more: what it was doing never ends.
        if self.registry.dies_sending(&self.me, &call) || self.registry.is_gone(&self.me) {
            std::future::pending::<()>().await;
        }
        let down = || PeerError::Unavailable(format!("{} is down", peer.id));
        let node = self.registry.node(&peer.id).ok_or_else(down)?;
        if self.registry.crashes(&peer.id, false) {
            return Err(down());
        }
        if self.registry.is_paused(&peer.id) {
            return Err(PeerError::Unavailable(format!(
                "{} did not answer",
                peer.id
            )));
        }
        if self.registry.drops_path(&call, false)
            || self.registry.roll(&peer.id, &call, |f| f.before)
        {
            return Err(PeerError::Unavailable("call dropped".into()));
        }
        let sent = call.clone();
        let reply = {
            let _serving = Serving::start(&self.registry.serving);
            node.serve(call).await
        };
        if self.registry.crashes(&peer.id, true) {
            return Err(down());
        }
        if self.registry.drops_path(&sent, true) || self.registry.roll(&peer.id, &sent, |f| f.after)
        {
            return Err(PeerError::Unavailable("answer lost".into()));
        }
        Ok(reply)
    }
}
