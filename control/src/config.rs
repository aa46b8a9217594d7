//! floe-control's configuration. [`FileConfig`] is what operators write (YAML, unknown keys
//! refused, every default named); [`Settings`] is the validated runtime form with secrets resolved.
//! Errors name the file, the key path and the reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// A whole floe-control config file.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The Iceberg REST catalog to follow. Absent: no catalog is followed (a scheduler-only
    /// floe-control), and `nodes` may be empty.
    #[serde(default)]
    pub catalog: Option<CatalogSection>,
    /// Which namespaces and tables to follow. Default: every table of every top-level namespace.
    #[serde(default)]
    pub follow: Vec<FollowSection>,
    /// The Floe nodes' admin endpoints; the first one serves the control plane's reads.
    #[serde(default)]
    pub nodes: Vec<NodeSection>,
    /// Warming budgets.
    #[serde(default)]
    pub warm: WarmSection,
    /// Compaction prefetch.
    #[serde(default)]
    pub prefetch: PrefetchSection,
    /// The heat ledger.
    #[serde(default)]
    pub heat: HeatSection,
    /// Pinned tables (`floe-control pin`).
    #[serde(default)]
    pub pins: PinsSection,
    /// The status endpoint `floe-control status` reads. Default 127.0.0.1:9102.
    #[serde(default = "default_status")]
    pub status_address: String,
    /// When the nodes are a fleet, how often their membership is re-read (the control plane
    /// then talks to every live member, not only the listed nodes). Default 5000 ms: a new
    /// node gets the next commit's metadata warm.
    #[serde(default = "default_fleet_poll_ms")]
    pub fleet_poll_ms: u64,
    /// TLS trust for https catalog and node URLs. Default: the Mozilla root set (webpki-roots)
    /// only, so public CAs work with no setting.
    #[serde(default)]
    pub tls: Option<TlsSection>,
    /// An OpenTelemetry collector's OTLP/HTTP base URL (e.g. `http://otel:4318`): scheduler
    /// runs are exported as spans, and `/metrics`'s metrics every
    /// `OTEL_METRIC_EXPORT_INTERVAL` ms (10 s by default). Default none.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// The CloudEvents scheduler. Default: none.
    #[serde(default)]
    pub scheduler: Option<floe_sched::config::SchedSection>,
}

/// Extra trust for https URLs.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM file of CA certificates trusted besides the default roots (a private CA, or a
    /// self-signed catalog or node certificate).
    pub ca_file: PathBuf,
}

/// The catalog: REST URI, optional warehouse, and auth (a bearer token or OAuth2 client
/// credentials, or neither).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CatalogSection {
    /// Base URI, e.g. `http://127.0.0.1:8181`.
    pub uri: String,
    /// Warehouse name or location sent to `GET /v1/config`. Default none.
    #[serde(default)]
    pub warehouse: Option<String>,
    /// Bearer token inline.
    #[serde(default)]
    pub token: Option<String>,
    /// Environment variable holding a bearer token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// OAuth2 client credentials.
    #[serde(default)]
    pub oauth2: Option<OAuth2Section>,
    /// Poll interval. Default 5000 ms: a commit is warm within seconds; a listing per table every
    /// 5 s is negligible load on a catalog.
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
}

/// OAuth2 client-credentials flow against the catalog's token endpoint.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Section {
    /// Client id.
    pub client_id: String,
    /// Environment variable holding the client secret.
    pub client_secret_env: String,
    /// Token endpoint. Default: the catalog's `v1/oauth/tokens`.
    #[serde(default)]
    pub server_uri: Option<String>,
    /// Scope. Default `catalog`.
    #[serde(default)]
    pub scope: Option<String>,
}

/// One followed namespace.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FollowSection {
    /// Namespace, dotted for nesting (`a.b`).
    pub namespace: String,
    /// Tables in it; empty means all of them (re-listed every poll).
    #[serde(default)]
    pub tables: Vec<String>,
}

/// One Floe node's admin API.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// Admin base URL, e.g. `http://127.0.0.1:9101`.
    pub admin: String,
    /// Admin token inline.
    #[serde(default)]
    pub token: Option<String>,
    /// Environment variable holding the admin token.
    #[serde(default)]
    pub token_env: Option<String>,
}

/// Warming budgets.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WarmSection {
    /// Objects warmed at once. Default 8: enough to hide a 30 ms origin round trip behind the
    /// others without queueing on the proxy's per-origin bound.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Byte rate of warming and prefetch together. Default 64 MiB/s: a fraction of a node's
    /// origin bandwidth, so foreground misses keep most of it.
    #[serde(default = "default_rate")]
    pub bytes_per_sec: u64,
    /// Most bytes one table's metadata and footers may take per commit; over it warming stops
    /// and the status says so. Default 256 MiB (the metadata store's usual DRAM share).
    #[serde(default = "default_budget")]
    pub table_budget_bytes: u64,
    /// First footer read per Parquet file (a suffix). Default 64 KiB, the proxy's footer size.
    #[serde(default = "default_footer")]
    pub footer_bytes: u64,
}

/// Prefetch after compaction.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrefetchSection {
    /// Default on.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Hottest (partition, column) pairs warmed per table. Default 32.
    #[serde(default = "default_pairs")]
    pub top_pairs: usize,
    /// Most bytes prefetched per replace commit. Default 1 GiB.
    #[serde(default = "default_prefetch_budget")]
    pub budget_bytes: u64,
    /// Prefetch yields (up to 1 s per read) while a node has more than this many client reads
    /// waiting on the origin. Default 0: any foreground miss goes first.
    #[serde(default)]
    pub yield_above: u64,
    /// Grace before data files a commit dropped (compaction, overwrite, delete) are purged from
    /// the proxies. Default: the table's `history.expire.max-snapshot-age-ms` (Iceberg's default
    /// 5 days), so time travel within the table's own retention stays warm.
    #[serde(default)]
    pub purge_after_ms: Option<u64>,
}

/// The heat ledger.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeatSection {
    /// Where the ledger persists. Default `.floe-control/heat.json`.
    #[serde(default = "default_heat_path")]
    pub path: PathBuf,
    /// Heat halves every this many seconds. Default 3600: yesterday's hot set fades by morning.
    #[serde(default = "default_half_life")]
    pub half_life_secs: u64,
    /// How often accesses are pulled from the nodes. Default 1000 ms.
    #[serde(default = "default_pull_ms")]
    pub pull_interval_ms: u64,
}

/// Pinned tables and the console's pin button.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinsSection {
    /// Where the pins persist (they outlive a restart of floe-control). Default
    /// `.floe-control/pins.json`, beside the heat ledger.
    #[serde(default = "default_pins_path")]
    pub path: PathBuf,
    /// Whether the console page shows pin and unpin buttons. Default false: the page is read
    /// only; `floe-control pin` and `POST /pins` work either way.
    #[serde(default)]
    pub console_buttons: bool,
}

impl Default for PinsSection {
    fn default() -> Self {
        Self {
            path: default_pins_path(),
            console_buttons: false,
        }
    }
}

fn default_pins_path() -> PathBuf {
    PathBuf::from(".floe-control/pins.json")
}

fn default_fleet_poll_ms() -> u64 {
    5000
}

fn default_status() -> String {
    "127.0.0.1:9102".into()
}
fn default_poll_ms() -> u64 {
    5000
}
fn default_concurrency() -> usize {
    8
}
fn default_rate() -> u64 {
    64 << 20
}
fn default_budget() -> u64 {
    256 << 20
}
fn default_footer() -> u64 {
    64 << 10
}
fn default_true() -> bool {
    true
}
fn default_pairs() -> usize {
    32
}
fn default_prefetch_budget() -> u64 {
    1 << 30
}
fn default_heat_path() -> PathBuf {
    PathBuf::from(".floe-control/heat.json")
}
fn default_half_life() -> u64 {
    3600
}
fn default_pull_ms() -> u64 {
    1000
}

impl Default for WarmSection {
    fn default() -> Self {
        Self {
            concurrency: default_concurrency(),
            bytes_per_sec: default_rate(),
            table_budget_bytes: default_budget(),
            footer_bytes: default_footer(),
        }
    }
}

impl Default for PrefetchSection {
    fn default() -> Self {
        Self {
            enabled: true,
            top_pairs: default_pairs(),
            budget_bytes: default_prefetch_budget(),
            yield_above: 0,
            purge_after_ms: None,
        }
    }
}

impl Default for HeatSection {
    fn default() -> Self {
        Self {
            path: default_heat_path(),
            half_life_secs: default_half_life(),
            pull_interval_ms: default_pull_ms(),
        }
    }
}

pub use floe_core::config::ConfigError;

/// A validated node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Admin base URL without a trailing slash.
    pub admin: String,
    /// Bearer token.
    pub token: String,
}

/// The validated runtime settings.
#[derive(Debug)]
pub struct Settings {
    /// Catalog properties for iceberg-catalog-rest (uri, warehouse, token or credential...).
    pub catalog_props: Vec<(String, String)>,
    /// Poll interval.
    pub poll: Duration,
    /// Followed namespaces and tables.
    pub follow: Vec<(Vec<String>, Vec<String>)>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Warming budgets.
    pub warm: WarmSection,
    /// Prefetch.
    pub prefetch: PrefetchSection,
    /// Heat ledger.
    pub heat: HeatSection,
    /// Pins.
    pub pins: PinsSection,
    /// Status listener.
    pub status_address: std::net::SocketAddr,
    /// Fleet membership poll interval, ms.
    pub fleet_poll_ms: u64,
    /// PEM of extra trusted CAs (validated), if any.
    pub ca_pem: Option<Vec<u8>>,
    /// Whether a catalog is followed (else only the status listener and scheduler run).
    pub follows_catalog: bool,
    /// The scheduler, when configured.
    pub scheduler: Option<floe_sched::config::SchedSettings>,
    /// OTLP/HTTP collector base URL.
    pub otlp_endpoint: Option<String>,
}

/// The config file's JSON Schema (generated from [`FileConfig`]; `conf/floe-control.schema.json`
/// holds it for editors).
pub fn schema() -> String {
    let mut s = schemars::schema_for!(FileConfig);
    s.insert("title".into(), "floe-control config".into());
    serde_json::to_string_pretty(&s).unwrap_or_default() + "\n"
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    floe_core::config::load(path, parse)
}

pub use crate::validate::parse;
