//! Membership by gossip: chitchat (Quickwit's scuttlebutt gossip with a phi-accrual failure
//! detector) over the authenticated transport. Each node publishes its peer address, capacity,
//! zone and state; the live set is turned into a [`View`] and published on every change.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig};
use floe_core::fleet::{Peer, PeerRef};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::mpsc;

use crate::config::FleetSettings;
use crate::handover;
use crate::metrics;
use crate::transport::HmacTransport;
use crate::view::{Member, MemberState, Membership, View};

const K_ADDR: &str = "peer_address";
const K_CAPACITY: &str = "capacity_bytes";
const K_ZONE: &str = "zone";
const K_STATE: &str = "state";
const K_ADMIN: &str = "admin_url";
/// Keys plugins publish (see [`floe_core::fleet::Fleet::publish`]) carry this prefix, so they
/// never clash with the membership's own.
const K_PUBLISHED: &str = "pub.";

/// The gossip worker's handle: started once, then watched for membership changes.
pub struct Gossip {
    handle: ChitchatHandle,
    draining: Arc<AtomicBool>,
}

fn generation() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Gossip {
    /// Joins the fleet described by `s` (binds the UDP socket).
    pub async fn start(s: &FleetSettings) -> anyhow::Result<Self> {
        let id = ChitchatId::new(s.node_id.clone(), generation(), s.gossip_advertise);
        let config = ChitchatConfig {
            chitchat_id: id,
            cluster_id: s.cluster_id.clone(),
            gossip_interval: s.gossip_interval,
            listen_addr: s.bind,
            seed_nodes: s.seeds.clone(),
            failure_detector_config: FailureDetectorConfig {
                phi_threshold: s.phi_threshold,
                sampling_window_size: 100,
                max_interval: Duration::from_secs(2),
                initial_interval: s.gossip_interval,
                dead_node_grace_period: Duration::from_secs(3600),
            },
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
        };
        let kv = vec![
            (K_ADDR.to_owned(), s.peer_address.clone()),
            (K_CAPACITY.to_owned(), s.capacity_bytes.to_string()),
            (K_ZONE.to_owned(), s.zone.clone()),
            (K_STATE.to_owned(), MemberState::Active.as_str().to_owned()),
            (K_ADMIN.to_owned(), s.admin_url.clone()),
        ];
        let transport = HmacTransport::new(&s.secret, &s.cluster_id);
        let handle = spawn_chitchat(config, kv, &transport).await?;
        Ok(Self {
            handle,
            draining: Arc::default(),
        })
    }

    /// Marks this node `draining` in its gossiped state (it leaves ownership everywhere as
    /// the state spreads, about one gossip round).
    pub async fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.handle
            .with_chitchat(|c| {
                c.self_node_state()
                    .set(K_STATE, MemberState::Draining.as_str())
            })
            .await;
    }

    /// Sets `key` (a plugin's, see [`floe_core::fleet::Fleet::publish`]) in this node's
    /// gossiped state.
    pub async fn publish(&self, key: &str, value: String) {
        let key = format!("{K_PUBLISHED}{key}");
        self.handle
            .with_chitchat(|c| c.self_node_state().set(&key, &value))
            .await;
    }

    /// Whether this node is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Follows the live set into `membership` for as long as gossip runs; sends each member
    /// to pull warm blocks from (see [`crate::handover::givers`]) on `givers`.
    pub async fn run(&self, membership: &Membership, givers: mpsc::UnboundedSender<PeerRef>) {
        let mut watcher = self.handle.with_chitchat(|c| c.live_nodes_watcher()).await;
        loop {
            let view = to_view(&watcher.borrow_and_update());
            let members = view.members.len() as i64;
            let next = Arc::new(view);
            let (moved, prev) = membership.publish_arc(next.clone());
            if next.summary() != prev.summary() {
                tracing::info!(members = %next.summary(), moved, "fleet view changed");
            }
            for g in handover::givers(&prev, &next, membership.me(), membership.is_warming()) {
                let _ = givers.send(g);
            }
            metrics::with(|m| {
                m.members.set(members);
                m.owner_moves.inc_by(moved as u64);
            });
            if watcher.changed().await.is_err() {
                break;
            }
        }
    }
}

/// The members a live-node map describes (nodes with an unreadable address are left out).
fn to_view(live: &std::collections::BTreeMap<ChitchatId, chitchat::NodeState>) -> View {
    let members = live
        .iter()
        .filter_map(|(id, st)| {
            let addr = st.get(K_ADDR)?;
            Some(Member {
                peer: Arc::new(Peer {
                    id: Arc::from(id.node_id.as_str()),
                    addr: Arc::from(addr),
                }),
                generation: id.generation_id,
                capacity: st.get(K_CAPACITY)?.parse().ok()?,
                zone: Arc::from(st.get(K_ZONE).unwrap_or("")),
                admin_url: Arc::from(st.get(K_ADMIN).unwrap_or("")),
                state: MemberState::parse(st.get(K_STATE).unwrap_or("")),
                published: st
                    .iter_prefix(K_PUBLISHED)
                    .map(|(k, v)| {
                        let k = k.strip_prefix(K_PUBLISHED).unwrap_or(k);
                        (Arc::from(k), Arc::from(v.value.as_str()))
                    })
                    .collect(),
            })
        })
        .collect();
    View::new(members)
}

/// Drains the node out of the fleet when the server shuts down (SIGTERM): it leaves
/// ownership at once and goes on serving peers as a donor for the grace period
/// ("floe-fleet-drain").
pub struct DrainOnShutdown(pub Arc<Gossip>);

#[async_trait]
impl BackgroundService for DrainOnShutdown {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        if !self.0.is_draining() {
            tracing::info!("shutting down: draining out of the fleet");
            self.0.drain().await;
        }
    }
}
