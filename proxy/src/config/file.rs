//! The external configuration: what operators write in YAML. Every section refuses unknown
//! keys, every default is named and says why. [`crate::config::settings`] turns this into the runtime
//! form (resolved secrets, parsed URLs) and is where cross-field rules are checked.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A whole floe-proxy config file.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Listeners and process-wide settings.
    pub server: ServerSection,
    /// Named origins (S3 endpoints, or an embedded local folder).
    #[serde(default)]
    pub origins: BTreeMap<String, OriginSection>,
    /// One route per bucket.
    pub routes: Vec<RouteSection>,
    /// The block cache; needed when a route lists the `blocks` filter. Parsed and validated by
    /// the blocks plugin (floe-blocks config.rs documents its keys).
    #[serde(default)]
    #[allow(dead_code)] // accepted here, read by the plugin from the same text
    #[schemars(with = "Option<floe_blocks::config::CacheSection>")]
    pub cache: Option<serde::de::IgnoredAny>,
    /// The fleet; without it this node works alone. Parsed and validated by the ring plugin
    /// (floe-ring config.rs documents its keys).
    #[serde(default)]
    #[allow(dead_code)] // accepted here, read by the plugin from the same text
    #[schemars(with = "Option<floe_ring::config::FleetSection>")]
    pub fleet: Option<serde::de::IgnoredAny>,
    /// Where this node keeps write-back fragments; needed when a route has `writeback:`.
    /// Parsed and validated by the writeback plugin (floe-writeback config.rs documents it).
    #[serde(default)]
    #[allow(dead_code)] // accepted here, read by the plugin from the same text
    #[schemars(with = "Option<floe_writeback::config::NodeSection>")]
    pub writeback: Option<serde::de::IgnoredAny>,
    /// The admin API listener. Default none.
    #[serde(default)]
    pub admin: Option<AdminSection>,
    /// The catalog route: a shallow, caching Iceberg REST proxy. Default none.
    #[serde(default)]
    pub catalog: Option<CatalogSection>,
}

/// The `catalog` route kind: requests under `path` go to an Iceberg REST catalog; successful
/// GETs are cached until a commit purges them or `ttl_ms` passes.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CatalogSection {
    /// The catalog's base URI (http or https), e.g. `http://127.0.0.1:8181`.
    pub upstream: String,
    /// Path prefix on Floe's S3 listeners. Default `/catalog` (a bucket of that name would be
    /// shadowed, so the config refuses one).
    #[serde(default = "default_catalog_path")]
    pub path: String,
    /// Freshness of a cached answer absent a purge. Default 30000 ms: commits through the route
    /// purge at once, commits elsewhere within floe-control's poll interval; the TTL bounds
    /// staleness when neither sees the commit.
    #[serde(default = "default_catalog_ttl_ms")]
    pub ttl_ms: u64,
    /// Memory for cached answers. Default 64 MiB (loadTable answers are KiB to a few MiB).
    #[serde(default = "default_catalog_cache_bytes")]
    pub cache_bytes: usize,
}

fn default_catalog_path() -> String {
    "/catalog".into()
}
fn default_catalog_ttl_ms() -> u64 {
    30_000
}
fn default_catalog_cache_bytes() -> usize {
    64 << 20
}

/// The admin API: its own listener and a bearer token (exactly one of token, token_env).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// `ip:port` to bind; keep it on a private interface.
    pub address: String,
    /// The token inline.
    #[serde(default)]
    pub token: Option<String>,
    /// Environment variable holding the token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Serve the admin API over TLS with this certificate and key. Default none (plain HTTP:
    /// bind it to a private interface).
    #[serde(default)]
    pub tls: Option<TlsSection>,
}

/// Process-wide settings.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Where clients connect; at least one.
    pub listeners: Vec<ListenerSection>,
    /// The region clients must sign for. Default `us-east-1`: what SDKs and engines assume
    /// when nothing is set.
    #[serde(default = "default_region")]
    pub region: String,
    /// Host names under which virtual-host addressing (`bucket.<hostname>`) is recognised.
    /// Default empty: path-style only, which is what engines use against custom endpoints.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Address of the Prometheus `/metrics` listener. Default none (no metrics listener).
    #[serde(default)]
    pub metrics_address: Option<String>,
    /// Worker threads. Default 2: one per core of a small node; raise on larger machines.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Seconds in-flight transfers get to finish after SIGTERM. Default 30: long enough for a
    /// multi-GiB transfer on a fast link, short enough for a rolling restart.
    #[serde(default = "default_grace")]
    pub grace_period_seconds: u64,
    /// OTLP collector endpoint for traces and metrics. Default none.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// Reload when the config file changes, besides on SIGHUP. Default `false`: an editor's
    /// half-written save would be refused and logged, so reloads are asked for by default.
    #[serde(default)]
    pub reload_watch: bool,
    /// The socket a new floe-proxy started with `--upgrade` takes the listening sockets over
    /// (Pingora's graceful upgrade; then SIGQUIT the old one). Default
    /// `/tmp/floe-proxy-upgrade.sock`; give each proxy on a machine its own.
    #[serde(default = "default_upgrade_sock")]
    pub upgrade_sock: String,
    /// Bytes a client connection's small writes (a header, chunk framing) are gathered in
    /// before they reach the socket; a body of 16 KiB or more, or one the buffer has no room
    /// for, leaves with them in one vectored write, never copied (`vendor/pingora-core`'s
    /// `GatherWriter`). Default 16 KiB: every response whose header fits leaves in one system
    /// call (Pingora's own default, 1,460 bytes, sends the header alone and then the body), at
    /// 16 KiB of memory per open client connection (16 MiB for 1,000). 0 writes straight to
    /// the socket: a header, then the body.
    #[serde(default = "default_write_buffer_bytes")]
    pub write_buffer_bytes: usize,
}

fn default_write_buffer_bytes() -> usize {
    16 << 10
}

fn default_upgrade_sock() -> String {
    "/tmp/floe-proxy-upgrade.sock".into()
}

/// One listener.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    /// `host:port` to bind.
    pub address: String,
    /// TLS certificate and key; plain HTTP when absent.
    #[serde(default)]
    pub tls: Option<TlsSection>,
}

/// TLS material for a listener (PEM files).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Certificate chain path.
    pub cert: String,
    /// Private key path.
    pub key: String,
}

/// How requests reach the origin's buckets.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Addressing {
    /// `endpoint/bucket/key` (default: works with every S3-compatible server).
    #[default]
    Path,
    /// `bucket.endpoint/key`.
    Virtual,
}

/// An origin: a remote S3 endpoint, or an embedded S3 server over a local folder.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OriginSection {
    /// `http://` or `https://` URL of the S3 endpoint. Exactly one of endpoint and embedded.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Serve a local folder through an in-process S3 server (quickstart).
    #[serde(default)]
    pub embedded: Option<EmbeddedSection>,
    /// Region to sign origin requests for. Default `us-east-1`.
    #[serde(default = "default_region")]
    pub region: String,
    /// Path or virtual-host addressing. Default path.
    #[serde(default)]
    pub addressing: Addressing,
    /// Credentials Floe signs origin requests with.
    #[serde(default)]
    pub credentials: CredentialsSection,
    /// Requests in flight to this origin at once; more wait. Default 256: well under the
    /// per-prefix request rates S3 allows, enough to keep a 10 Gbit/s link busy.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// Retries of idempotent requests on connection failures. Default 2.
    #[serde(default = "default_retries")]
    pub retries: usize,
    /// Connect timeout in milliseconds. Default 2000.
    #[serde(default = "default_connect_ms")]
    pub connect_timeout_ms: u64,
    /// Idle read timeout in milliseconds. Default 60000: S3 itself closes idle reads later.
    #[serde(default = "default_read_ms")]
    pub read_timeout_ms: u64,
    /// Circuit breaker settings.
    #[serde(default)]
    pub breaker: BreakerSection,
    /// Hedged reads for the block cache's fills. Default none (off): each hedge is one more
    /// GET the origin bills and serves, worth it when the origin's tail is long (S3's is).
    #[serde(default)]
    pub hedge: Option<HedgeSection>,
}

/// When a fill's ranged GET has not answered (response headers in) after `after_ms`, or after
/// the `percentile` of the origin's observed first-byte latency, one more GET for the same
/// bytes goes out and the first answer is used; at most `max_share` of reads are hedged.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HedgeSection {
    /// A fixed wait in milliseconds before hedging. Default none: the observed percentile,
    /// which follows the origin (hedging starts after its first 64 answers).
    #[serde(default)]
    pub after_ms: Option<u64>,
    /// The percentile of observed first-byte latency a read waits before it is hedged.
    /// Default 95: the slowest 5% are the tail hedging cuts, at a few percent more GETs.
    #[serde(default = "default_hedge_percentile")]
    pub percentile: f64,
    /// Largest share of reads hedged, 0..0.5. Default 0.05: when the whole origin is slow,
    /// hedging every read would only double its load.
    #[serde(default = "default_hedge_share")]
    pub max_share: f64,
}

fn default_hedge_percentile() -> f64 {
    95.0
}

fn default_hedge_share() -> f64 {
    0.05
}

/// The in-process S3 server over a folder.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedSection {
    /// The folder; each route's bucket is a subfolder, created on start.
    pub root: String,
}

/// Where origin credentials come from.
#[derive(Debug, Deserialize, Default, schemars::JsonSchema)]
#[serde(tag = "from", rename_all = "lowercase", deny_unknown_fields)]
pub enum CredentialsSection {
    /// No credentials: requests go unsigned (public buckets). The default.
    #[default]
    None,
    /// Environment variables.
    Env {
        /// Variable holding the access key id.
        access_key_env: String,
        /// Variable holding the secret.
        secret_key_env: String,
    },
    /// Files (e.g. mounted Kubernetes secrets), each holding one value.
    File {
        /// File holding the access key id.
        access_key_file: String,
        /// File holding the secret.
        secret_key_file: String,
    },
}

/// Circuit breaker: after `failures` consecutive connection failures the origin is considered
/// down for `open_ms`, and requests get 503 SlowDown at once instead of waiting on timeouts.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerSection {
    /// Consecutive failures that open the breaker. Default 3.
    #[serde(default = "default_breaker_failures")]
    pub failures: u32,
    /// How long it stays open before one trial request. Default 2000 ms.
    #[serde(default = "default_breaker_open_ms")]
    pub open_ms: u64,
}

impl Default for BreakerSection {
    fn default() -> Self {
        Self {
            failures: default_breaker_failures(),
            open_ms: default_breaker_open_ms(),
        }
    }
}

/// A route: one bucket (or a pattern of them), its origin, who may use it, and its filters.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// The bucket clients address, or a glob over bucket names (`analytics-*`: `*` any run of
    /// characters, `?` one) for a deployment in front of many buckets. A request goes to the
    /// route naming its bucket exactly, else to the first route whose pattern matches.
    pub bucket: String,
    /// Name of an entry under `origins`.
    pub origin: String,
    /// Unsigned requests. Default `false` (every request is signed). `true` lets anyone read:
    /// GetObject, HeadObject, ListObjects and ListObjectsV2 only, because Floe re-signs what it
    /// forwards with the origin's keys and a write would borrow them. `{operations: [..]}` names
    /// exactly the operations anonymous callers may use (S3 names, e.g. `PutObject`).
    #[serde(default)]
    pub anonymous: AnonymousSection,
    /// Client key pairs accepted on this route.
    #[serde(default)]
    pub clients: Vec<ClientSection>,
    /// Filter stages, in order. Default `[sigv4]`.
    #[serde(default = "default_filters")]
    pub filters: Vec<String>,
    /// Write-back of this route's PUTs (`{k, m, w, max_object_bytes, stripe_bytes}`), with
    /// the `writeback` filter listed before `blocks`. Default none: PUTs go to the origin.
    /// Parsed and validated by the writeback plugin.
    #[serde(default)]
    #[allow(dead_code)] // accepted here, read by the plugin from the same text
    #[schemars(with = "Option<floe_writeback::config::RouteSection>")]
    pub writeback: Option<serde::de::IgnoredAny>,
    /// Carry bucket-level operations to the origin: CreateBucket, DeleteBucket,
    /// Get/PutBucketVersioning and the bucket's configuration (`floe_core::subresource`:
    /// lifecycle, policy, tags, ACL, CORS, encryption, object lock, ...). Default `false`: they
    /// answer 501 NotImplemented, because a cache in front of buckets should not create,
    /// delete or reconfigure them unless its operator says so. (HeadBucket, GetBucketLocation
    /// and ListMultipartUploads are always carried, and so is an object's own configuration.)
    #[serde(default)]
    pub bucket_operations: bool,
}

/// `anonymous:` on a route: a flag, or the list of operations unsigned requests may use.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum AnonymousSection {
    /// `true`: read-only; `false`: none.
    Flag(bool),
    /// `{operations: [GetObject, ...]}`.
    Operations(AnonymousOperations),
}

impl Default for AnonymousSection {
    fn default() -> Self {
        Self::Flag(false)
    }
}

/// The operations an anonymous caller may use.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnonymousOperations {
    /// S3 operation names.
    pub operations: Vec<String>,
}

/// One client key pair; the secret comes from exactly one of the three fields.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// The access key id clients sign with.
    pub access_key: String,
    /// The secret inline (fine for local quickstarts; prefer env or file).
    #[serde(default)]
    pub secret_key: Option<String>,
    /// Environment variable holding the secret.
    #[serde(default)]
    pub secret_key_env: Option<String>,
    /// File holding the secret.
    #[serde(default)]
    pub secret_key_file: Option<String>,
}

fn default_region() -> String {
    "us-east-1".to_owned()
}
fn default_threads() -> usize {
    2
}
fn default_grace() -> u64 {
    30
}
fn default_concurrency() -> usize {
    256
}
fn default_retries() -> usize {
    2
}
fn default_connect_ms() -> u64 {
    2000
}
fn default_read_ms() -> u64 {
    60_000
}
fn default_breaker_failures() -> u32 {
    3
}
fn default_breaker_open_ms() -> u64 {
    2000
}
fn default_filters() -> Vec<String> {
    vec!["sigv4".to_owned()]
}
