//! Routes by bucket pattern (`bucket: "analytics-*"`). The stages of a route are built per
//! bucket, as plugins key their state by bucket (the block cache's keys, a fleet's peer
//! server, write-back options), so a pattern route builds them for each bucket on its first
//! request and publishes them by copy-on-write: a lookup is a load, never a lock.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use floe_core::BucketName;
use floe_filter::plugin::StartError;

use crate::chain::Plugins;
use crate::config::settings::RouteSpec;
use crate::origin::Origin;
use crate::routes::Route;

/// Buckets one pattern route keeps built routes for. Past it, a bucket's route is built for
/// each request and not kept: a client naming endless matching buckets cannot grow memory
/// without bound (at the cost of building stages per request for those).
const KEPT_BUCKETS: usize = 10_000;

/// One pattern route.
pub struct PatternRoute {
    spec: RouteSpec,
    origin: Arc<Origin>,
    plugins: Plugins,
    region: String,
    built: ArcSwap<HashMap<String, Arc<Route>>>,
}

impl PatternRoute {
    /// A pattern route over `spec` (whose bucket is a pattern).
    pub fn new(spec: &RouteSpec, origin: &Arc<Origin>, plugins: &Plugins, region: &str) -> Self {
        Self {
            spec: spec.clone(),
            origin: origin.clone(),
            plugins: plugins.clone(),
            region: region.to_owned(),
            built: ArcSwap::default(),
        }
    }

    /// Whether the pattern matches `bucket`.
    pub fn matches(&self, bucket: &str) -> bool {
        self.spec.bucket.matches(bucket)
    }

    /// Whether `access_key` may use the route.
    pub fn accepts(&self, access_key: &str) -> bool {
        self.spec.clients.iter().any(|(k, _)| k == access_key)
    }

    /// The origin.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The route for `bucket` (which the pattern matches), built on first use.
    pub fn route(&self, bucket: &str) -> Result<Arc<Route>, StartError> {
        if let Some(r) = self.built.load().get(bucket) {
            return Ok(r.clone());
        }
        let name = BucketName::parse(bucket).map_err(|e| e.to_string())?;
        let route = Arc::new(Route::build(
            &self.spec,
            &name,
            &self.origin,
            &self.plugins,
            &self.region,
        )?);
        if self.built.load().len() >= KEPT_BUCKETS {
            return Ok(route);
        }
        // Two first requests racing each build; the first published wins and both use it.
        let mut kept = route.clone();
        self.built.rcu(|m| {
            let mut m = HashMap::clone(m);
            kept = m
                .entry(bucket.to_owned())
                .or_insert_with(|| route.clone())
                .clone();
            m
        });
        Ok(kept)
    }
}
