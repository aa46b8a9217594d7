//! The `blocks` plugin: owns the `cache:` config section, opens the block cache once at
//! start-up, builds one [`BlockFilter`] per route that lists `blocks`, and serves the cache's
//! admin endpoints.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use async_trait::async_trait;
use floe_core::config::{ConfigCx, ConfigError};
use floe_core::fleet::Fleet;
use floe_core::versions::Versions;
use floe_filter::plugin::{
    AdminHandler, Configured, Plugin, PluginFactory, RouteCx, Shared, StartError,
};
use floe_filter::RequestFilter;
use pingora::server::ShutdownWatch;
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::ServiceWithDependents;

use crate::admin::BlocksAdmin;
use crate::cache::{BlockCache, CacheSettings};
use crate::config::{validate, FileSections};
use crate::filter::BlockFilter;
use crate::forget::{forget_here, tell_fleet, Forget};
use crate::service::BlocksService;

/// The factory the proxy lists.
pub static FACTORY: BlocksFactory = BlocksFactory;

/// Makes the `blocks` plugin from the `cache:` section.
pub struct BlocksFactory;

impl PluginFactory for BlocksFactory {
    fn name(&self) -> &'static str {
        "blocks"
    }

    fn sections(&self) -> &'static [&'static str] {
        &["cache"]
    }

    fn configure(&self, cx: &ConfigCx<'_>, text: &str) -> Result<Box<dyn Configured>, ConfigError> {
        let raw: FileSections =
            serde_saphyr::from_str(text).map_err(|e| cx.err("(yaml)", e.to_string()))?;
        let settings = match &raw.cache {
            Some(c) => Some(validate(cx, c)?),
            None => None,
        };
        Ok(Box::new(BlocksConfig { settings }))
    }
}

/// The validated `cache:` section (none: no route may list `blocks`).
#[derive(Debug)]
pub struct BlocksConfig {
    /// The cache's settings.
    pub settings: Option<CacheSettings>,
}

/// The runtime foyer's stores run their disk I/O and flushers on; it lives as long as the
/// process (Pingora's runtimes are per service and start later).
static CACHE_RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

#[async_trait]
impl Configured for BlocksConfig {
    fn check_route(&self, cx: &ConfigCx<'_>, key: &str) -> Result<(), ConfigError> {
        match self.settings {
            Some(_) => Ok(()),
            None => Err(cx.err(key, "the blocks filter needs a top-level cache: section")),
        }
    }

    async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError> {
        let cache = match self.settings {
            None => None,
            Some(s) => {
                if CACHE_RUNTIME.get().is_none() {
                    let rt = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .thread_name("floe-cache")
                        .enable_all()
                        .build()?;
                    let _ = CACHE_RUNTIME.set(rt);
                }
                let rt = CACHE_RUNTIME
                    .get()
                    .ok_or("the cache runtime did not start")?;
                let cache = rt.spawn(BlockCache::open(s)).await??;
                tracing::info!("block cache opened");
                match crate::gauges::CacheCollector::new(cache.clone()) {
                    // Fails only when registered twice (tests open several caches).
                    Ok(c) => drop(prometheus::register(Box::new(c))),
                    Err(e) => tracing::warn!(error = %e, "block cache metrics not registered"),
                }
                Some(cache)
            }
        };
        Ok(Arc::new(BlocksPlugin {
            cache,
            routes: Arc::default(),
            mount_once: std::sync::Once::new(),
        }))
    }
}

/// The started plugin: the cache and the stages built on it, by bucket.
pub struct BlocksPlugin {
    cache: Option<Arc<BlockCache>>,
    routes: Arc<RwLock<HashMap<String, Arc<BlockFilter>>>>,
    /// The peer service is mounted (and its hand-over taker registered) once.
    mount_once: std::sync::Once,
}

impl BlocksPlugin {
    /// The cache, when configured.
    pub fn cache(&self) -> Option<&Arc<BlockCache>> {
        self.cache.as_ref()
    }
}

impl Plugin for BlocksPlugin {
    fn name(&self) -> &'static str {
        "blocks"
    }

    fn build(&self, route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
        let cache = self
            .cache
            .clone()
            .ok_or("the blocks filter needs a cache: section")?;
        let origin = route
            .origin
            .clone()
            .ok_or("the blocks filter needs a route origin")?;
        let bucket = route
            .bucket
            .ok_or("the blocks filter needs a route bucket")?;
        let mut filter = BlockFilter::new(cache, origin, bucket.as_str());
        if let Some(fleet) = route.shared.get::<Arc<dyn Fleet>>() {
            filter.cache.returning.in_fleet();
            filter = filter.in_fleet(fleet.clone());
            filter.catch_up = Some(crate::missed::CatchUp {
                cache: filter.cache.clone(),
                routes: Arc::downgrade(&self.routes),
                fleet: fleet.clone(),
            });
            // One service for every route, mounted once (its fill slots are the node's).
            self.mount_once.call_once(|| {
                let service = Arc::new(BlocksService {
                    cache: filter.cache.clone(),
                    routes: self.routes.clone(),
                    fills: Arc::default(),
                    max_fills: fleet.max_owner_fills(),
                });
                fleet.mount(crate::forget::SERVICE, service.clone());
                fleet.take_over_with(service);
            });
        }
        let filter = Arc::new(filter);
        if let Ok(mut r) = self.routes.write() {
            r.insert(bucket.as_str().to_owned(), filter.clone());
        }
        Ok(filter)
    }

    fn share(&self, shared: &mut Shared) {
        if let Some(cache) = &self.cache {
            shared.insert::<Arc<dyn Versions>>(Arc::new(BlockVersions {
                cache: cache.clone(),
                routes: self.routes.clone(),
            }));
        }
    }

    fn not_ready(&self) -> Option<String> {
        self.cache.as_ref()?.returning.not_ready()
    }

    fn admin(&self) -> Option<Arc<dyn AdminHandler>> {
        let cache = self.cache.clone()?;
        Some(Arc::new(BlocksAdmin::new(cache, self.routes.clone())))
    }

    fn background(&self) -> Vec<Box<dyn ServiceWithDependents>> {
        let Some(cache) = self.cache.clone() else {
            return Vec::new();
        };
        let mut workers: Vec<Box<dyn ServiceWithDependents>> = vec![Box::new(background_service(
            "floe-cache-settle",
            SettleOnShutdown(cache.clone()),
        ))];
        if cache.settings.populate_dram {
            workers.push(Box::new(background_service(
                "floe-pool-populate",
                crate::pool::populate::Populate {
                    block_bytes: cache.settings.block_bytes as usize,
                },
            )));
        }
        workers.push(Box::new(background_service(
            "floe-cache-alive",
            crate::missed::Alive {
                cache,
                routes: self.routes.clone(),
            },
        )));
        workers
    }
}

/// The block cache's versions, as other plugins forget them (see [`Versions`]).
struct BlockVersions {
    cache: Arc<BlockCache>,
    routes: Arc<RwLock<HashMap<String, Arc<BlockFilter>>>>,
}

#[async_trait]
impl Versions for BlockVersions {
    fn forget(&self, bucket: &str, key: &str) {
        forget_here(&self.cache, &self.routes, bucket, key);
        // The other members resolved it too (through its owner): they are told as well.
        let route = self.routes.read().ok().and_then(|r| r.get(bucket).cloned());
        if let Some(fleet) = route.and_then(|f| f.fleet.clone()) {
            let forget = Forget::keys(bucket, vec![key.to_owned()]);
            self.cache.forgets.record(&forget);
            let cache = self.cache.clone();
            tokio::spawn(async move { tell_fleet(&fleet, &cache.recipients, &forget, &[]).await });
        }
    }

    async fn forget_everywhere(&self, bucket: &str, key: &str) {
        let route = self.routes.read().ok().and_then(|r| r.get(bucket).cloned());
        match route {
            Some(filter) => filter.forget_everywhere(vec![key.to_owned()]).await,
            None => forget_here(&self.cache, &self.routes, bucket, key),
        }
    }
}

/// On shutdown, writes the partial blocks still in DRAM to the disk tier (they are written
/// when they leave DRAM, and a shutdown is leaving) and waits for the stores' pending disk
/// writes (blocks, mappings, tombstones), so a stopped node restarts with everything it held;
/// the stores stay open for the transfers the grace period lets finish.
struct SettleOnShutdown(Arc<BlockCache>);

#[async_trait]
impl BackgroundService for SettleOnShutdown {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        self.0.write_partials().await;
        self.0.settle().await;
        tracing::info!("block cache writes settled for shutdown");
    }
}
