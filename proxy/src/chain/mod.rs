//! The filter chain's plugins: the only place in floe-proxy that names the plugin crates.
//! Adding a filter is one crate under plugins/ and one line in [`factories`].
//!
//! Config time: [`configure`] has each factory parse and validate its own sections and check
//! the routes that list it. Start-up: [`start`] opens each plugin once; [`Plugins::build`] makes
//! a route's stage by name; the admin listener and the server take the plugins' admin
//! endpoints and background services.

use std::collections::HashMap;
use std::sync::Arc;

use floe_core::config::{ConfigCx, ConfigError};
use floe_core::OriginReader;
use floe_filter::plugin::{
    AdminHandler, Configured, Plugin, PluginFactory, RouteCx, Shared, StartError,
};
use floe_filter::RequestFilter;
use pingora::services::ServiceWithDependents;

use crate::config::settings::{RouteSpec, AUTH_STAGE};

/// Validated plugin configurations by name, in chain order.
pub type ConfiguredPlugins = Vec<(&'static str, Box<dyn Configured>)>;

/// Every plugin floe-proxy carries, in the order their sections are validated.
pub fn factories() -> Vec<&'static dyn PluginFactory> {
    vec![
        &floe_sigv4::FACTORY,
        &floe_ring::FACTORY,
        &floe_blocks::FACTORY,
        &floe_writeback::FACTORY,
    ]
}

/// Validates every factory's sections of `text` and checks each route's use of each plugin.
pub fn configure(
    cx: &ConfigCx<'_>,
    text: &str,
    routes: &[RouteSpec],
    factories: &[&'static dyn PluginFactory],
) -> Result<ConfiguredPlugins, ConfigError> {
    let mut out = Vec::new();
    for f in factories {
        let configured = f.configure(cx, text)?;
        for (i, r) in routes.iter().enumerate() {
            if r.filters.iter().any(|n| n == f.name()) {
                configured.check_route(cx, &format!("routes[{i}].filters"))?;
            }
        }
        out.push((f.name(), configured));
    }
    Ok(out)
}

/// The started plugins, by name.
#[derive(Clone)]
pub struct Plugins {
    by_name: HashMap<&'static str, Arc<dyn Plugin>>,
    order: Vec<&'static str>,
    shared: Shared,
}

/// Starts every configured plugin, in order.
pub async fn start(configured: ConfiguredPlugins) -> Result<Plugins, StartError> {
    let mut by_name = HashMap::new();
    let mut order = Vec::new();
    let mut shared = Shared::new();
    for (name, c) in configured {
        let plugin = c
            .start()
            .await
            .map_err(|e| format!("starting plugin {name}: {e}"))?;
        plugin.share(&mut shared);
        by_name.insert(name, plugin);
        order.push(name);
    }
    Ok(Plugins {
        by_name,
        order,
        shared,
    })
}

impl Plugins {
    /// Builds the stage `name` for one route.
    pub fn build(
        &self,
        name: &str,
        route: &RouteCx<'_>,
    ) -> Result<Arc<dyn RequestFilter>, StartError> {
        let plugin = self
            .by_name
            .get(name)
            .ok_or_else(|| format!("no plugin named {name:?}"))?;
        plugin.build(route)
    }

    /// The origin reader the stages after `name` get (see
    /// [`floe_filter::plugin::Plugin::origin_layer`]).
    pub fn origin_layer(
        &self,
        name: &str,
        route: &RouteCx<'_>,
        inner: Arc<dyn OriginReader>,
    ) -> Arc<dyn OriginReader> {
        match self.by_name.get(name) {
            Some(p) => p.origin_layer(route, inner),
            None => inner,
        }
    }

    /// The stage that authenticates requests to no route (ListBuckets, unknown buckets)
    /// against every route's clients.
    pub fn authenticator(&self, route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
        self.build(AUTH_STAGE, route)
    }

    /// What the started plugins share with the stages they build.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Every plugin's admin endpoints, in chain order.
    pub fn admin(&self) -> Vec<Arc<dyn AdminHandler>> {
        self.order
            .iter()
            .filter_map(|n| self.by_name.get(n)?.admin())
            .collect()
    }

    /// The first plugin's reason the node is not ready yet, if any.
    pub fn not_ready(&self) -> Option<String> {
        self.order
            .iter()
            .filter_map(|n| self.by_name.get(n))
            .find_map(|p| p.not_ready())
    }

    /// Every plugin's background services.
    pub fn background(&self) -> Vec<Box<dyn ServiceWithDependents>> {
        self.order
            .iter()
            .filter_map(|n| self.by_name.get(n))
            .flat_map(|p| p.background())
            .collect()
    }
}

#[cfg(test)]
mod tests;
