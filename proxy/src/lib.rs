//! Floe's S3 data plane on Pingora, as a library: the config and its validation, the route
//! table, origin signing, hedging and the breaker, the filter chain, the HTTP modes, the admin
//! API, metrics, probes and reload. The `floe-proxy` binary (`main.rs`) wires them into a
//! Pingora server; fuzz targets and integration tests call them directly.

pub mod admin;
pub mod bucket_list;
pub mod bucket_match;
pub mod catalog;
pub mod catalog_index;
pub mod catalog_mode;
pub mod chain;
pub mod config;
pub mod embedded;
pub mod hedge;
pub mod metrics;
pub mod mode;
pub mod origin;
pub mod origin_parts;
pub mod origin_reader;
pub mod otel;
pub mod post;
pub mod probes;
pub mod reload;
pub mod respond;
pub mod route_config;
pub mod route_patterns;
pub mod routes;
pub mod runtime;
pub mod s3;
pub mod service;

#[cfg(test)]
mod runtime_tests;

/// The config file's JSON Schema (generated from the config types; editors validate with it).
pub fn schema() -> String {
    let mut s = schemars::schema_for!(config::FileConfig);
    s.insert("title".into(), "floe-proxy config".into());
    serde_json::to_string_pretty(&s).unwrap_or_default() + "\n"
}
