//! Following the proxies' fleet: the nodes the control plane talks to are the configured ones,
//! or, when those are members of a fleet, every live member the fleet's gossip reports (each
//! node advertises its admin URL). The `fleet` worker re-reads the membership periodically and
//! publishes the node set with one pointer swap, so workers never lock to find their nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::Node;
use crate::node::NodeClient;
use crate::state::Control;
use floe_core::worker::{pause, Activity, Handle, Shutdown};

/// The current node set.
pub struct Nodes {
    current: ArcSwap<Vec<NodeClient>>,
    fleet: AtomicBool,
}

impl Nodes {
    /// The configured nodes (until a fleet is found).
    pub fn new(nodes: Vec<NodeClient>) -> Self {
        Self {
            current: ArcSwap::from_pointee(nodes),
            fleet: AtomicBool::new(false),
        }
    }

    /// The nodes now (a cheap snapshot; the first one serves the control plane's reads).
    pub fn current(&self) -> Arc<Vec<NodeClient>> {
        self.current.load_full()
    }

    /// Whether the nodes are a fleet (blocks have owners: data prefetch goes to them only).
    pub fn is_fleet(&self) -> bool {
        self.fleet.load(Ordering::Relaxed)
    }

    fn publish(&self, nodes: Vec<NodeClient>) {
        self.fleet.store(true, Ordering::Relaxed);
        self.current.store(Arc::new(nodes));
    }
}

/// A node index for `key` among `n` nodes, spread by key (the same within one process, which
/// is all prefetch needs: any node routes blocks to their owners).
pub fn pick(key: &str, n: usize) -> usize {
    use std::hash::BuildHasher;
    let h = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(key);
    (h % n.max(1) as u64) as usize
}

/// Asks the nodes (current, then configured) for their fleet's membership; publishes it when
/// it changed. Returns how many members the fleet has (`None`: not a fleet).
pub async fn follow_once(ctl: &Control) -> Option<usize> {
    let token = ctl.settings.nodes.first().map(|n| n.token.clone())?;
    let current = ctl.nodes.current();
    let configured = ctl.settings.nodes.iter().cloned().map(NodeClient::new);
    let asked: Vec<NodeClient> = current.iter().cloned().chain(configured).collect();
    for n in &asked {
        match n.fleet().await {
            Ok(Some(urls)) if !urls.is_empty() => {
                let now: Vec<&str> = current.iter().map(NodeClient::url).collect();
                if now != urls.iter().map(String::as_str).collect::<Vec<_>>() {
                    tracing::info!(members = ?urls, "following the fleet's membership");
                    let nodes = urls
                        .iter()
                        .map(|u| {
                            NodeClient::new(Node {
                                admin: u.clone(),
                                token: token.clone(),
                            })
                        })
                        .collect();
                    ctl.nodes.publish(nodes);
                }
                return Some(urls.len());
            }
            Ok(_) => return None,
            Err(e) => tracing::debug!(node = n.url(), error = %e, "fleet view unavailable"),
        }
    }
    None
}

/// Runs the membership follower until shutdown.
pub async fn run(ctl: Arc<Control>, h: Handle, mut stop: Shutdown) {
    let every = Duration::from_millis(ctl.settings.fleet_poll_ms);
    loop {
        let found = follow_once(&ctl).await;
        h.done();
        match found {
            Some(n) => h.set(Activity::Idle, format!("{n} fleet members")),
            None => h.set(Activity::Idle, "configured nodes"),
        }
        if pause(&mut stop, every).await {
            return;
        }
    }
}
