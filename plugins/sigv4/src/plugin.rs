//! The `sigv4` plugin: no config section of its own (client keys and anonymous operations are
//! route keys); builds one [`SigV4Filter`] per route from the route's clients.

use std::sync::Arc;

use async_trait::async_trait;
use floe_core::config::{ConfigCx, ConfigError};
use floe_filter::plugin::{Configured, Plugin, PluginFactory, RouteCx, StartError};
use floe_filter::RequestFilter;

use crate::filter::SigV4Filter;
use crate::verify::Verifier;

/// The factory the proxy lists.
pub static FACTORY: SigV4Factory = SigV4Factory;

/// Makes the `sigv4` plugin.
pub struct SigV4Factory;

impl PluginFactory for SigV4Factory {
    fn name(&self) -> &'static str {
        "sigv4"
    }

    fn configure(
        &self,
        _cx: &ConfigCx<'_>,
        _text: &str,
    ) -> Result<Box<dyn Configured>, ConfigError> {
        Ok(Box::new(SigV4Config))
    }
}

/// Nothing to configure beyond the routes.
#[derive(Debug)]
pub struct SigV4Config;

#[async_trait]
impl Configured for SigV4Config {
    async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError> {
        Ok(Arc::new(SigV4Plugin))
    }
}

/// The started plugin.
pub struct SigV4Plugin;

impl Plugin for SigV4Plugin {
    fn name(&self) -> &'static str {
        "sigv4"
    }

    fn build(&self, route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
        let verifier = Verifier::new(route.region, route.clients.iter().cloned());
        Ok(Arc::new(SigV4Filter::new(
            verifier,
            route.anonymous.to_vec(),
        )))
    }
}
