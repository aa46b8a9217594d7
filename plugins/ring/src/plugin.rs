//! The `ring` plugin: owns the `fleet:` section, joins the fleet at start-up (gossip and the
//! peer API run on a runtime of their own), and shares the [`Ring`] with the block cache as
//! `Arc<dyn Fleet>`. It is not a route stage: routes list `blocks`, which finds the fleet.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use floe_core::config::{ConfigCx, ConfigError};
use floe_core::fleet::{
    Fleet, Membership as FleetMembership, PeerError, PeerRef, PeerRequest, PeerResponse,
    PeerService, Placement, Transport, Warmth,
};
use floe_filter::plugin::{
    AdminHandler, AdminRequest, AdminResponse, Configured, Plugin, PluginFactory, RouteCx, Shared,
    StartError,
};
use floe_filter::RequestFilter;
use pingora::services::background::background_service;
use pingora::services::ServiceWithDependents;

use crate::client::PeerClient;
use crate::config::{validate_with, FileSections, FleetSettings};
use crate::gossip::{DrainOnShutdown, Gossip};
use crate::handover::{Handover, Progress, Takers};
use crate::server::{PeerApi, PeerListener};
use crate::view::Membership;

/// The factory the proxy lists.
pub static FACTORY: RingFactory = RingFactory;

/// Makes the `ring` plugin from the `fleet:` section.
pub struct RingFactory;

impl PluginFactory for RingFactory {
    fn name(&self) -> &'static str {
        "ring"
    }

    fn sections(&self) -> &'static [&'static str] {
        &["fleet"]
    }

    fn configure(&self, cx: &ConfigCx<'_>, text: &str) -> Result<Box<dyn Configured>, ConfigError> {
        let raw: FileSections =
            serde_saphyr::from_str(text).map_err(|e| cx.err("(yaml)", e.to_string()))?;
        let settings = match &raw.fleet {
            Some(f) => Some(validate_with(cx, f, raw.admin.as_ref())?),
            None => None,
        };
        Ok(Box::new(RingConfig { settings }))
    }
}

/// The validated `fleet:` section (none: one node).
#[derive(Debug)]
pub struct RingConfig {
    settings: Option<FleetSettings>,
}

/// Gossip, the membership follower and the peer API run here: started before Pingora's
/// runtimes exist, living as long as the process (a drained node keeps serving peers).
static FLEET_RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

fn runtime() -> Result<&'static tokio::runtime::Runtime, StartError> {
    if FLEET_RUNTIME.get().is_none() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("floe-fleet")
            .enable_all()
            .build()?;
        let _ = FLEET_RUNTIME.set(rt);
    }
    FLEET_RUNTIME
        .get()
        .ok_or_else(|| "the fleet runtime did not start".into())
}

#[async_trait]
impl Configured for RingConfig {
    fn check_route(&self, cx: &ConfigCx<'_>, key: &str) -> Result<(), ConfigError> {
        Err(cx.err(
            key,
            "ring is not a route filter: a fleet: section puts every blocks route in the fleet",
        ))
    }

    async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError> {
        let Some(s) = self.settings else {
            return Ok(Arc::new(RingPlugin { ring: None }));
        };
        let rt = runtime()?;
        let ring = rt.spawn(Ring::join(s)).await??;
        Ok(Arc::new(RingPlugin { ring: Some(ring) }))
    }
}

/// This node in the fleet: the membership view, the peer client, the peer API's servers.
pub struct Ring {
    me: Arc<str>,
    membership: Arc<Membership>,
    client: Arc<PeerClient>,
    progress: Arc<Progress>,
    takers: Takers,
    gossip: Arc<Gossip>,
    listener: Arc<PeerListener>,
    settings: FleetSettings,
}

impl Ring {
    /// Binds the peer API, starts gossip and the membership follower (on the current runtime).
    pub async fn join(s: FleetSettings) -> Result<Arc<Ring>, StartError> {
        let me: Arc<str> = Arc::from(s.node_id.as_str());
        let secret = Arc::new(s.secret.clone());
        let listener = tokio::net::TcpListener::bind(s.bind)
            .await
            .map_err(|e| format!("cannot bind the peer API to {}: {e}", s.bind))?;
        let listener = Arc::new(PeerListener {
            listener: std::sync::Mutex::new(Some(listener)),
            api: Arc::new(PeerApi {
                node: me.clone(),
                key: crate::frames::key(&secret),
                secret: secret.clone(),
                seen: Arc::default(),
                services: Arc::default(),
            }),
            tls: match &s.tls {
                Some(t) => Some(crate::tls::acceptor(t)?),
                None => None,
            },
        });
        let gossip = Arc::new(
            Gossip::start(&s)
                .await
                .map_err(|e| format!("cannot start gossip on {}/udp: {e}", s.bind))?,
        );
        let membership = Arc::new(Membership::warming(me.clone(), s.warm_window).in_zone(&s.zone));
        let ca = s.tls.as_ref().map(|t| t.ca.as_str());
        let client = Arc::new(PeerClient::new(secret, s.peer_timeout, ca));
        let progress = Arc::new(Progress::default());
        let takers = Takers::default();
        let handover = Handover {
            takers: takers.clone(),
            bytes_per_sec: s.handover_bytes_per_sec,
            max_items: s.handover_max_blocks,
            progress: progress.clone(),
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(handover.run(rx));
        let (g, m) = (gossip.clone(), membership.clone());
        tokio::spawn(async move { g.run(&m, tx).await });
        let l = listener.clone();
        tokio::spawn(async move { l.serve().await });
        tracing::info!(node = %me, address = %s.peer_address, "joined the fleet");
        Ok(Arc::new(Ring {
            me,
            membership,
            client,
            progress,
            takers,
            gossip,
            listener,
            settings: s,
        }))
    }

    /// The membership view.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }
}

#[async_trait]
impl FleetMembership for Ring {
    fn node_id(&self) -> &Arc<str> {
        &self.me
    }

    fn member(&self, id: &str) -> Option<PeerRef> {
        self.membership.member(id)
    }

    fn others(&self) -> Vec<PeerRef> {
        self.membership.others()
    }

    fn expects_peers(&self) -> bool {
        !self.settings.seeds.is_empty()
    }

    async fn publish(&self, key: &str, value: String) {
        self.gossip.publish(key, value).await;
    }

    fn published(&self, id: &str, key: &str) -> Option<Arc<str>> {
        self.membership.published(id, key)
    }

    fn take_over_with(&self, taker: Arc<dyn Warmth>) {
        if let Ok(mut t) = self.takers.lock() {
            t.push(taker);
        }
    }
}

impl Placement for Ring {
    fn owner(&self, bucket: &str, key: &str, index: u64) -> Option<PeerRef> {
        self.membership.owner(bucket, key, index)
    }

    fn next_owner(&self, bucket: &str, key: &str, index: u64, busy: &PeerRef) -> Option<PeerRef> {
        self.membership.next_owner(bucket, key, index, busy)
    }

    fn donors(&self, bucket: &str, key: &str, index: u64) -> Vec<PeerRef> {
        self.membership.donors(bucket, key, index)
    }

    fn ranked(&self, name: &str) -> Vec<PeerRef> {
        self.membership.ranked(name)
    }

    fn max_owner_fills(&self) -> usize {
        self.settings.max_owner_fills
    }
}

#[async_trait]
impl Transport for Ring {
    async fn open(
        &self,
        peer: &PeerRef,
        service: &str,
        request: PeerRequest,
        wait: std::time::Duration,
    ) -> Result<PeerResponse, PeerError> {
        self.client.open(peer, service, request, wait).await
    }

    fn peer_timeout(&self) -> std::time::Duration {
        self.settings.peer_timeout
    }

    fn mount(&self, service: &str, svc: Arc<dyn PeerService>) {
        if let Ok(mut s) = self.listener.api.services.write() {
            s.insert(service.to_owned(), svc);
        }
    }
}

/// The started plugin.
pub struct RingPlugin {
    ring: Option<Arc<Ring>>,
}

impl Plugin for RingPlugin {
    fn name(&self) -> &'static str {
        "ring"
    }

    fn build(&self, _route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
        Err("ring is not a route filter".into())
    }

    fn share(&self, shared: &mut Shared) {
        if let Some(r) = &self.ring {
            shared.insert::<Arc<dyn Fleet>>(r.clone());
        }
    }

    fn admin(&self) -> Option<Arc<dyn AdminHandler>> {
        self.ring.clone().map(|r| r as Arc<dyn AdminHandler>)
    }

    fn background(&self) -> Vec<Box<dyn ServiceWithDependents>> {
        let Some(r) = &self.ring else {
            return Vec::new();
        };
        vec![Box::new(background_service(
            "floe-fleet-drain",
            DrainOnShutdown(r.gossip.clone()),
        ))]
    }
}

/// `GET /fleet`: this node's view; `POST /fleet/drain`: leave ownership now (as SIGTERM does).
#[async_trait]
impl AdminHandler for Ring {
    async fn handle(&self, req: &AdminRequest) -> Option<AdminResponse> {
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/fleet") => Some(AdminResponse::json(200, self.view_doc())),
            ("POST", "/fleet/drain") => {
                self.gossip.drain().await;
                Some(AdminResponse::json(200, self.view_doc()))
            }
            _ => None,
        }
    }
}

impl Ring {
    fn view_doc(&self) -> serde_json::Value {
        let view = self.membership.load();
        let members: Vec<serde_json::Value> = view
            .members
            .iter()
            .map(|m| {
                serde_json::json!({
                    "node_id": &*m.peer.id,
                    "peer_address": &*m.peer.addr,
                    "generation": m.generation,
                    "capacity_bytes": m.capacity,
                    "zone": &*m.zone,
                    "state": m.state.as_str(),
                    "admin_url": &*m.admin_url,
                })
            })
            .collect();
        serde_json::json!({
            "node_id": &*self.me,
            "draining": self.gossip.is_draining(),
            "peer_timeout_ms": self.settings.peer_timeout.as_millis() as u64,
            "listening": self.listener.is_bound(),
            "handover": {
                "runs": self.progress.runs.load(Ordering::Relaxed),
                "blocks": self.progress.blocks.load(Ordering::Relaxed),
                "bytes": self.progress.bytes.load(Ordering::Relaxed),
                "failed": self.progress.failed.load(Ordering::Relaxed),
                "givers": self.progress.givers(),
            },
            "members": members,
        })
    }
}
