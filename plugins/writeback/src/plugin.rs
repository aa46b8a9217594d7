//! The `writeback` plugin: owns the top-level `writeback:` section and routes' `writeback:`
//! options, opens the fragment store and journal, builds each route's stage, mounts the store
//! on the fleet's peer API, runs the propagator ("floe-writeback-propagate") and answers
//! `GET /writeback` on the admin listener.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use floe_core::config::{ConfigCx, ConfigError};
use floe_core::fleet::{Fleet, Membership, PeerRef, Placement, Transport};
use floe_core::OriginReader;
use floe_filter::plugin::{
    AdminHandler, AdminRequest, AdminResponse, Configured, Plugin, PluginFactory, RouteCx,
    StartError,
};
use floe_filter::RequestFilter;
use pingora::services::background::background_service;
use pingora::services::ServiceWithDependents;

use crate::config::{self, Settings};
use crate::filter::WritebackFilter;
use crate::fragments::Fragments;
use crate::journal::Journal;
use crate::multipart::Uploads;
use crate::node::{Node, NodeService};
use crate::propagate::{Counts, Origins, Propagator};
use crate::repair::{RepairCounts, Repairer};
use crate::service::{Store, SERVICE};
use crate::upload_files::UploadFiles;

/// The plugin's factory, as the proxy lists it.
pub static FACTORY: WritebackFactory = WritebackFactory;

/// Makes the `writeback` plugin.
pub struct WritebackFactory;

impl PluginFactory for WritebackFactory {
    fn name(&self) -> &'static str {
        "writeback"
    }

    fn sections(&self) -> &'static [&'static str] {
        &["writeback"]
    }

    fn configure(&self, cx: &ConfigCx<'_>, text: &str) -> Result<Box<dyn Configured>, ConfigError> {
        Ok(Box::new(WritebackConfig(config::parse(cx, text)?)))
    }
}

/// The validated write-back config.
#[derive(Debug)]
pub struct WritebackConfig(Settings);

#[async_trait]
impl Configured for WritebackConfig {
    fn check_route(&self, cx: &ConfigCx<'_>, key: &str) -> Result<(), ConfigError> {
        match self.0.node {
            Some(_) => Ok(()),
            None => Err(cx.err(
                key,
                "the writeback filter needs a top-level writeback: section",
            )),
        }
    }

    async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError> {
        let parts = match &self.0.node {
            None => None,
            Some(n) => Some((
                Fragments::open(&n.fragments, n.capacity_bytes)
                    .map_err(|e| format!("{}: {e}", n.fragments.display()))?,
                Journal::open(&n.journal).map_err(|e| format!("{}: {e}", n.journal.display()))?,
                UploadFiles::open(&n.uploads)
                    .and_then(Uploads::on_disk)
                    .map_err(|e| format!("{}: {e}", n.uploads.display()))?,
            )),
        };
        Ok(Arc::new(WritebackPlugin {
            settings: self.0,
            parts: Mutex::new(parts),
            node: Arc::default(),
            origins: Origins::default(),
            counts: Arc::default(),
            repairs: Arc::default(),
        }))
    }
}

/// The started plugin.
pub struct WritebackPlugin {
    settings: Settings,
    parts: Mutex<Option<(Fragments, Journal, Uploads)>>,
    node: Arc<OnceLock<Arc<Node>>>,
    origins: Origins,
    counts: Arc<Counts>,
    repairs: Arc<RepairCounts>,
}

impl WritebackPlugin {
    /// This node's write-back state, made at the first route's build (the fleet is known
    /// then): the journal replays into the index and the store is mounted on the peer API.
    fn node(&self, route: &RouteCx<'_>) -> Result<Arc<Node>, StartError> {
        if let Some(n) = self.node.get() {
            return Ok(n.clone());
        }
        let parts = self.parts.lock().ok().and_then(|mut p| p.take());
        let Some((fragments, journal, uploads)) = parts else {
            return Err("the writeback filter needs a top-level writeback: section".into());
        };
        let fleet: Arc<dyn Fleet> = route
            .shared
            .get::<Arc<dyn Fleet>>()
            .cloned()
            .unwrap_or_else(|| Arc::new(Alone(Arc::from("local"))));
        let members = journal.dir().parent().map(|d| d.join("floe-wb-members"));
        let store = Arc::new(Store::new(fleet.node_id().clone(), fragments, journal));
        let node = Arc::new(Node::new(store.clone(), fleet.clone(), uploads));
        if let Some(path) = members {
            // A restarted node still sends journal copies and frees to the members it saw
            // before, until gossip lists them again (see floe_core::recent).
            node.recent.keep_in(path);
        }
        let _ = node.origins.set(self.origins.clone());
        if let Some(v) = route.shared.get::<Arc<dyn floe_core::versions::Versions>>() {
            let _ = node.versions.set(v.clone());
        }
        let records = store.journal.replay()?;
        tracing::info!(
            records = records.len(),
            uploads = node.uploads.len(),
            "write-back journal replayed"
        );
        for r in records {
            node.replay(r);
        }
        fleet.mount(SERVICE, Arc::new(NodeService(node.clone())));
        match crate::gauges::StateCollector::new(
            node.clone(),
            self.counts.clone(),
            self.repairs.clone(),
        ) {
            // Fails only when registered twice (tests make several nodes in one process).
            Ok(c) => drop(prometheus::register(Box::new(c))),
            Err(e) => tracing::warn!(error = %e, "write-back metrics not registered"),
        }
        let _ = self.node.set(node.clone());
        Ok(self.node.get().cloned().unwrap_or(node))
    }
}

impl Plugin for WritebackPlugin {
    fn name(&self) -> &'static str {
        "writeback"
    }

    fn build(&self, route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
        let node = self.node(route)?;
        let bucket = route
            .bucket
            .map(|b| b.as_str().to_owned())
            .unwrap_or_default();
        if let (Some(origin), Ok(mut o)) = (route.origin.clone(), self.origins.write()) {
            o.insert(bucket.clone(), origin);
        }
        Ok(Arc::new(WritebackFilter {
            node,
            opts: self.settings.routes.get(route.route).copied(),
            bucket,
            origins: self.origins.clone(),
            // The block cache after this stage reads staged writes through `origin_layer`.
            cache_after: route.later.iter().any(|s| s == "blocks"),
        }))
    }

    fn not_ready(&self) -> Option<String> {
        let caught_up = self.node.get().is_none_or(|n| n.is_caught_up());
        (!caught_up).then(|| "write-back is catching up on the fleet's journals".to_owned())
    }

    fn origin_layer(
        &self,
        _route: &RouteCx<'_>,
        inner: Arc<dyn OriginReader>,
    ) -> Arc<dyn OriginReader> {
        match self.node.get() {
            Some(node) => Arc::new(crate::origin_layer::StagedOrigin {
                node: node.clone(),
                inner,
            }),
            None => inner,
        }
    }

    fn admin(&self) -> Option<Arc<dyn AdminHandler>> {
        Some(Arc::new(Admin {
            node: self.node.clone(),
            counts: self.counts.clone(),
            repairs: self.repairs.clone(),
        }))
    }

    fn background(&self) -> Vec<Box<dyn ServiceWithDependents>> {
        let (Some(node), Some(n)) = (self.node.get(), &self.settings.node) else {
            return Vec::new();
        };
        vec![
            Box::new(background_service(
                "floe-writeback-propagate",
                Propagator {
                    node: node.clone(),
                    origins: self.origins.clone(),
                    retry_max: Duration::from_millis(n.retry_max_ms),
                    concurrency: n.propagate_concurrency,
                    counts: self.counts.clone(),
                },
            )),
            Box::new(background_service(
                "floe-writeback-room",
                crate::room::Advertiser { node: node.clone() },
            )),
            Box::new(background_service(
                "floe-writeback-repair",
                Repairer {
                    node: node.clone(),
                    scrub_every: Duration::from_millis(n.scrub_interval_ms),
                    grace: Duration::from_millis(n.repair_grace_ms),
                    orphan_after: Duration::from_millis(n.orphan_after_ms),
                    counts: self.repairs.clone(),
                    origins: self.origins.clone(),
                },
            )),
        ]
    }
}

/// `GET /writeback`: what is staged and not yet at the origin, and what propagation did.
struct Admin {
    node: Arc<OnceLock<Arc<Node>>>,
    counts: Arc<Counts>,
    repairs: Arc<RepairCounts>,
}

#[async_trait]
impl AdminHandler for Admin {
    async fn handle(&self, req: &AdminRequest) -> Option<AdminResponse> {
        if req.path != "/writeback" {
            return None;
        }
        let Some(node) = self.node.get() else {
            return Some(AdminResponse::json(
                200,
                serde_json::json!({"enabled": false}),
            ));
        };
        let dirty = node.staged.all();
        let (objects, bytes, oldest_ms) = node.backlog();
        let c = &self.counts;
        Some(AdminResponse::json(
            200,
            serde_json::json!({
                "enabled": true,
                "node": node.me(),
                "dirty_objects": objects,
                "dirty_bytes": bytes,
                "oldest_age_ms": oldest_ms,
                "indexed_objects": dirty.len(),
                "fragment_bytes": node.store.fragments.used(),
                "fragment_ceiling_bytes": node.store.fragments.ceiling(),
                "free_bytes": node.free_bytes(),
                "peer_free_bytes": node.advertised(),
                "propagated": c.propagated.load(Ordering::Relaxed),
                "propagated_bytes": c.bytes.load(Ordering::Relaxed),
                "propagation_failures": c.failures.load(Ordering::Relaxed),
                "superseded": c.superseded.load(Ordering::Relaxed),
                "corrupt_shards": crate::metrics::corrupt_total(),
                "scrubbed_fragments": self.repairs.examined.load(Ordering::Relaxed),
                "bad_fragments": self.repairs.bad.load(Ordering::Relaxed),
                "repairs": self.repairs.repaired.load(Ordering::Relaxed),
                "orphan_fragments_removed": self.repairs.orphans.load(Ordering::Relaxed),
            }),
        ))
    }
}

/// The fleet of a node without a `fleet:` section: itself, placing nothing (every write-back
/// PUT then goes straight to the origin, as fewer than w nodes are eligible).
pub(crate) struct Alone(pub(crate) Arc<str>);

impl Membership for Alone {
    fn node_id(&self) -> &Arc<str> {
        &self.0
    }
}

impl Placement for Alone {
    fn owner(&self, _bucket: &str, _key: &str, _index: u64) -> Option<PeerRef> {
        None
    }
}

impl Transport for Alone {}
