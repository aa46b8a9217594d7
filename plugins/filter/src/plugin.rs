//! The plugin seam: each `plugins/*` crate exports one [`PluginFactory`]. The proxy lists the
//! factories in one place (its `chain.rs`) and knows nothing else about them:
//!
//! 1. at config time, each factory parses and validates the top-level sections it owns
//!    ([`PluginFactory::configure`], no side effects, so `floe-proxy check` runs it too) and
//!    checks each route that lists it ([`Configured::check_route`]);
//! 2. at start-up, [`Configured::start`] opens what the plugin needs (a cache, a connection);
//! 3. for every route that lists the plugin, [`Plugin::build`] makes the route's stage once;
//! 4. the plugin's admin endpoints and background services join the admin listener and the
//!    server.
//!
//! ```
//! use std::sync::Arc;
//! use floe_core::config::{ConfigCx, ConfigError};
//! use floe_filter::plugin::{Configured, Plugin, PluginFactory, RouteCx, StartError};
//! use floe_filter::RequestFilter;
//!
//! struct Noop;
//! impl RequestFilter for Noop {
//!     fn name(&self) -> &'static str { "noop" }
//! }
//! struct NoopPlugin;
//! impl Plugin for NoopPlugin {
//!     fn name(&self) -> &'static str { "noop" }
//!     fn build(&self, _route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
//!         Ok(Arc::new(Noop))
//!     }
//! }
//! #[derive(Debug)]
//! struct NoopConfigured;
//! #[async_trait::async_trait]
//! impl Configured for NoopConfigured {
//!     async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError> {
//!         Ok(Arc::new(NoopPlugin))
//!     }
//! }
//! struct NoopFactory;
//! impl PluginFactory for NoopFactory {
//!     fn name(&self) -> &'static str { "noop" }
//!     fn configure(&self, _cx: &ConfigCx<'_>, _text: &str)
//!         -> Result<Box<dyn Configured>, ConfigError> {
//!         Ok(Box::new(NoopConfigured))
//!     }
//! }
//! assert_eq!(NoopFactory.name(), "noop");
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::RequestFilter;
use floe_core::config::{ConfigCx, ConfigError};
use floe_core::{BucketName, OriginReader, S3Op};

/// Why a plugin could not start or build a stage.
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

/// What a route hands a plugin building its stage.
pub struct RouteCx<'a> {
    /// The route's bucket; `None` for the stage that authenticates requests to no route
    /// (ListBuckets, unknown buckets).
    pub bucket: Option<&'a BucketName>,
    /// The route's `bucket:` as the config file writes it: the bucket, or the pattern a
    /// pattern route was built from (for it, the stages are built once per bucket). Options
    /// a plugin reads from the route's config are found by it. Empty without a route.
    pub route: &'a str,
    /// The region clients sign for.
    pub region: &'a str,
    /// The client key pairs the route accepts.
    pub clients: &'a [(String, String)],
    /// Operations unsigned requests may use.
    pub anonymous: &'a [S3Op],
    /// Reads from the route's origin, signed as the proxy signs (`None` without a route), as
    /// the stages before this one layered it (see [`Plugin::origin_layer`]).
    pub origin: Option<Arc<dyn OriginReader>>,
    /// The names of the route's stages after this one, in order.
    pub later: &'a [String],
    /// What plugins started earlier share with later ones (e.g. the fleet, as
    /// `Arc<dyn Fleet>`).
    pub shared: &'a Shared,
}

/// What started plugins share with the stages other plugins build, by type.
pub type Shared = http::Extensions;

/// Makes a plugin from the config file.
pub trait PluginFactory: Sync {
    /// The plugin's name, as routes list it under `filters:`.
    fn name(&self) -> &'static str;

    /// The top-level config keys this plugin owns (the proxy accepts them and leaves them to
    /// it). Default none.
    fn sections(&self) -> &'static [&'static str] {
        &[]
    }

    /// Parses and validates this plugin's sections of the config file `text` (the whole
    /// file; other sections are ignored). Errors name the file, key path and reason. No side
    /// effects: `floe-proxy check` runs this too.
    fn configure(&self, cx: &ConfigCx<'_>, text: &str) -> Result<Box<dyn Configured>, ConfigError>;
}

/// A plugin's validated configuration, before start-up.
#[async_trait]
pub trait Configured: Send + Sync + std::fmt::Debug {
    /// Checks that a route listing this plugin (at config key `key`, e.g. `routes[2].filters`)
    /// can be served. Default: any route.
    fn check_route(&self, _cx: &ConfigCx<'_>, _key: &str) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Opens what the plugin needs (caches, clients). Called once, before any route is built.
    async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError>;
}

/// A started plugin.
pub trait Plugin: Send + Sync {
    /// The plugin's name.
    fn name(&self) -> &'static str;

    /// The stage of one route (built once at start-up, shared by the route's requests).
    fn build(&self, route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError>;

    /// The origin reader the route's later stages get, given the one this stage got: a plugin
    /// holding versions the origin does not have yet (write-back's staged writes) serves them
    /// here, so a cache stage after it resolves and fills them like any other. Contract: the
    /// layer keeps [`OriginReader`]'s (If-Match on every ranged read) and passes through what
    /// it does not hold. Default: `inner`, unchanged.
    fn origin_layer(
        &self,
        _route: &RouteCx<'_>,
        inner: Arc<dyn OriginReader>,
    ) -> Arc<dyn OriginReader> {
        inner
    }

    /// The plugin's admin endpoints, if it has any.
    fn admin(&self) -> Option<Arc<dyn AdminHandler>> {
        None
    }

    /// Puts what this plugin offers other plugins' stages into `shared` (called once, after
    /// start-up, in chain order). Default nothing.
    fn share(&self, _shared: &mut Shared) {}

    /// Background services to run beside the proxy (named workers with a shutdown signal).
    fn background(&self) -> Vec<Box<dyn pingora::services::ServiceWithDependents>> {
        Vec::new()
    }

    /// Why the node must not be sent clients yet (`/readyz` answers 503 with it), or `None`
    /// when this plugin has no objection. Called on every probe: cheap, no I/O. Default none.
    fn not_ready(&self) -> Option<String> {
        None
    }
}

/// One request to the admin listener, authenticated already.
#[derive(Debug, Clone)]
pub struct AdminRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, e.g. `/warm`.
    pub path: String,
    /// Query parameters, percent-decoded.
    pub query: HashMap<String, String>,
    /// The body (bounded by the admin listener).
    pub body: Bytes,
}

impl AdminRequest {
    /// A query parameter, or "".
    pub fn param(&self, name: &str) -> &str {
        self.query.get(name).map_or("", String::as_str)
    }
}

/// An admin answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminResponse {
    /// HTTP status.
    pub status: u16,
    /// Extra headers (`content-type` is set from the body kind).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Bytes,
    /// `application/json` (true) or `application/octet-stream`.
    pub json: bool,
}

impl AdminResponse {
    /// A JSON answer.
    pub fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Bytes::from(value.to_string()),
            json: true,
        }
    }

    /// A wire document (see `floe_core::wire`) as JSON.
    pub fn doc<T: serde::Serialize>(status: u16, doc: &T) -> Self {
        match serde_json::to_value(doc) {
            Ok(v) => Self::json(status, v),
            Err(e) => Self::error(500, e),
        }
    }

    /// A JSON `{"error": ...}` answer (a [`floe_core::wire::ErrorDoc`]).
    pub fn error(status: u16, message: impl std::fmt::Display) -> Self {
        Self::json(status, serde_json::json!({ "error": message.to_string() }))
    }
}

/// A plugin's admin endpoints.
///
/// Contract: `handle` answers `Some` for the requests it owns and `None` for every other, so
/// several plugins can share the admin listener; it must not block the async thread.
#[async_trait]
pub trait AdminHandler: Send + Sync {
    /// Answers `req` if it is one of this plugin's endpoints.
    async fn handle(&self, req: &AdminRequest) -> Option<AdminResponse>;
}
