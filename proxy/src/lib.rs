//! Floe's S3 data plane on Pingora, as a library. The `floe-proxy` binary (`main.rs`) wires
//! these parts into a Pingora server; fuzz targets and the integration tests in `proxy/tests/`
//! call them directly.
//!
//! - [`config`]: the YAML file (`file`), validated into [`config::settings::Settings`]
//!   (`settings`, with the routes' own rules in `routes`).
//! - [`routes`]: the route table (a bucket, or a bucket pattern, to its origin and chain).
//! - [`chain`]: the filter chain's plugins, the one place that names the filter crates.
//! - [`origin`]: an origin at run time (signing, bound, breaker), its reader for the filters,
//!   hedged reads, multipart propagation, and the embedded origin of the quickstart.
//! - [`modes`]: the kinds of request a listener carries (S3 on a route, the catalog route) and
//!   the answers Floe writes itself (S3 XML errors, ListBuckets, POST Object).
//! - [`catalog`]: the Iceberg REST route's cache and its namespace index.
//! - [`service`]: the Pingora `ProxyHttp` that hands each phase to the request's mode;
//!   [`server`]: every listener and service assembled into a Pingora server.
//! - [`ops`]: what operators touch: the admin API, metrics, OTLP export, probes, hot reload.

pub mod catalog;
pub mod chain;
pub mod config;
pub mod modes;
pub mod ops;
pub mod origin;
pub mod routes;
pub mod server;
pub mod service;

/// The config file's JSON Schema (generated from the config types; editors validate with it).
pub fn schema() -> String {
    let mut s = schemars::schema_for!(config::file::FileConfig);
    s.insert("title".into(), "floe-proxy config".into());
    serde_json::to_string_pretty(&s).unwrap_or_default() + "\n"
}
