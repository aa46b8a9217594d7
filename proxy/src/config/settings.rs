//! From the external YAML to validated, resolved settings. Every error names the file, the key
//! (as a path like `routes[1].clients[0].secret_key_env`) and the reason.

use std::collections::BTreeMap;
use std::path::Path;

use floe_core::config::ConfigCx as Ctx;
pub use floe_core::config::ConfigError;

use floe_filter::plugin::PluginFactory;

use crate::config::file::{
    Addressing, BreakerSection, CredentialsSection, FileConfig, OriginSection,
};

/// The stage every route runs first: nothing happens before a request is verified.
pub const AUTH_STAGE: &str = "sigv4";

/// The largest `server.write_buffer_bytes`: 4 MiB per connection is already more than any
/// response it is meant to gather (a header and a small range).
const MAX_WRITE_BUFFER_BYTES: usize = 4 << 20;

/// A listener, validated.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Bind address.
    pub address: String,
    /// (cert, key) paths for TLS.
    pub tls: Option<(String, String)>,
}

/// Process-wide settings, validated.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Listeners.
    pub listeners: Vec<Listener>,
    /// The region clients sign for.
    pub region: String,
    /// Virtual-host base names.
    pub hostnames: Vec<String>,
    /// Metrics listener.
    pub metrics_address: Option<String>,
    /// Worker threads.
    pub threads: usize,
    /// Grace period on SIGTERM.
    pub grace_period_seconds: u64,
    /// OTLP endpoint.
    pub otlp_endpoint: Option<String>,
    /// Reload when the file changes.
    pub reload_watch: bool,
    /// The graceful-upgrade socket.
    pub upgrade_sock: String,
    /// Bytes a client connection's writes gather in before the socket.
    pub write_buffer_bytes: usize,
}

/// Where an origin lives.
#[derive(Debug, Clone)]
pub enum OriginPlace {
    /// A remote endpoint.
    Remote(url::Url),
    /// An embedded server over this folder.
    Embedded(String),
}

/// An origin, validated, with credentials resolved.
#[derive(Debug, Clone)]
pub struct OriginSpec {
    /// Config name.
    pub name: String,
    /// Endpoint or embedded folder.
    pub place: OriginPlace,
    /// Signing region.
    pub region: String,
    /// Addressing style.
    pub addressing: Addressing,
    /// (access key, secret), if signed.
    pub credentials: Option<(String, String)>,
    /// Concurrency bound.
    pub max_concurrency: usize,
    /// Retries on connection failure.
    pub retries: usize,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
    /// Read timeout.
    pub read_timeout_ms: u64,
    /// Breaker threshold.
    pub breaker_failures: u32,
    /// Breaker open time.
    pub breaker_open_ms: u64,
    /// Hedged fills, when on.
    pub hedge: Option<crate::origin::hedge::Policy>,
}

/// A route, validated.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    /// The bucket, or a pattern of them.
    pub bucket: crate::routes::bucket_match::BucketMatch,
    /// Origin name.
    pub origin: String,
    /// Operations unsigned requests may use (empty: none).
    pub anonymous: Vec<floe_core::S3Op>,
    /// Client key pairs.
    pub clients: Vec<(String, String)>,
    /// Filter stages in order, by plugin name (each a known plugin).
    pub filters: Vec<String>,
    /// Bucket-level operations are carried to the origin.
    pub bucket_operations: bool,
}

/// The admin listener, validated.
#[derive(Debug, Clone)]
pub struct AdminSpec {
    /// Bind address.
    pub address: String,
    /// Bearer token.
    pub token: String,
    /// (cert, key) paths for TLS.
    pub tls: Option<(String, String)>,
}

/// A whole validated config.
#[derive(Debug)]
pub struct Settings {
    /// Server settings.
    pub server: ServerSettings,
    /// Origins by name.
    pub origins: BTreeMap<String, OriginSpec>,
    /// Routes.
    pub routes: Vec<RouteSpec>,
    /// Every plugin's validated configuration, in the chain's order.
    pub plugins: crate::chain::ConfiguredPlugins,
    /// The admin listener, when configured.
    pub admin: Option<AdminSpec>,
    /// The catalog route, when configured.
    pub catalog: Option<crate::catalog::CatalogSpec>,
    /// This node's name in telemetry: `fleet.node_id` (or `$HOSTNAME`, as the fleet defaults),
    /// else the host name.
    pub node_id: String,
}

/// `fleet.node_id`, read past everything else (the ring plugin validates the section).
#[derive(serde::Deserialize)]
struct NodePeek {
    #[serde(default)]
    fleet: Option<NodePeekFleet>,
}

#[derive(serde::Deserialize)]
struct NodePeekFleet {
    #[serde(default)]
    node_id: Option<String>,
}

fn node_id(text: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let peek: Option<NodePeek> = serde_saphyr::from_str(text).ok();
    peek.and_then(|p| p.fleet)
        .and_then(|f| f.node_id)
        .or_else(|| env("HOSTNAME"))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "floe-proxy".into())
}

/// Reads and validates a config file, taking secrets from the process environment.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    floe_core::config::load(path, parse)
}

/// Parses and validates config text; `env` resolves environment variables.
pub fn parse(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigError> {
    parse_with(file, text, env, &crate::chain::factories())
}

/// As [`parse`], with the plugins `factories` (the chain's, or a test's).
pub fn parse_with(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    factories: &[&'static dyn PluginFactory],
) -> Result<Settings, ConfigError> {
    let cx = Ctx { file, env };
    let raw: FileConfig =
        serde_saphyr::from_str(text).map_err(|e| cx.err("(yaml)", e.to_string()))?;
    let server = server(&cx, &raw)?;
    let mut origins = BTreeMap::new();
    for (name, o) in &raw.origins {
        origins.insert(name.clone(), origin(&cx, name, o)?);
    }
    let names: Vec<&str> = factories.iter().map(|f| f.name()).collect();
    let routes = crate::config::routes::routes(&cx, &raw, &origins, &names)?;
    let plugins = crate::chain::configure(&cx, text, &routes, factories)?;
    let admin = match &raw.admin {
        None => None,
        Some(a) => {
            if a.address.parse::<std::net::SocketAddr>().is_err() {
                return Err(cx.err(
                    "admin.address",
                    format!("{:?} is not an ip:port address", a.address),
                ));
            }
            let token = match (&a.token, &a.token_env) {
                (Some(t), None) if !t.is_empty() => t.clone(),
                (None, Some(v)) => cx.secret_env("admin.token_env", v)?,
                _ => return Err(cx.err("admin", "set exactly one of token, token_env")),
            };
            Some(AdminSpec {
                address: a.address.clone(),
                token,
                tls: a.tls.as_ref().map(|t| (t.cert.clone(), t.key.clone())),
            })
        }
    };
    let catalog = match &raw.catalog {
        None => None,
        Some(c) => Some(crate::catalog::CatalogSpec::validate(&cx, c, &routes)?),
    };
    Ok(Settings {
        server,
        origins,
        routes,
        plugins,
        admin,
        catalog,
        node_id: node_id(text, env),
    })
}

fn server(cx: &Ctx<'_>, raw: &FileConfig) -> Result<ServerSettings, ConfigError> {
    let s = &raw.server;
    if s.listeners.is_empty() {
        return Err(cx.err("server.listeners", "at least one listener is needed"));
    }
    let mut listeners = Vec::new();
    for (i, l) in s.listeners.iter().enumerate() {
        if l.address.parse::<std::net::SocketAddr>().is_err() {
            return Err(cx.err(
                format!("server.listeners[{i}].address"),
                format!("{:?} is not an ip:port address", l.address),
            ));
        }
        listeners.push(Listener {
            address: l.address.clone(),
            tls: l.tls.as_ref().map(|t| (t.cert.clone(), t.key.clone())),
        });
    }
    if s.write_buffer_bytes > MAX_WRITE_BUFFER_BYTES {
        return Err(cx.err(
            "server.write_buffer_bytes",
            format!(
                "{} is more than {MAX_WRITE_BUFFER_BYTES} (each open client connection holds this much)",
                s.write_buffer_bytes
            ),
        ));
    }
    if s.threads == 0 {
        return Err(cx.err("server.threads", "must be at least 1"));
    }
    if let Some(m) = &s.metrics_address {
        if m.parse::<std::net::SocketAddr>().is_err() {
            return Err(cx.err(
                "server.metrics_address",
                format!("{m:?} is not an ip:port address"),
            ));
        }
    }
    if let Some(ep) = &s.otlp_endpoint {
        let ok = url::Url::parse(ep).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
        if !ok {
            return Err(cx.err("server.otlp_endpoint", format!("{ep:?} must be an http:// or https:// URL (OTLP/HTTP, e.g. http://collector:4318)")));
        }
    }
    Ok(ServerSettings {
        listeners,
        region: s.region.clone(),
        hostnames: s.hostnames.iter().map(|h| h.to_ascii_lowercase()).collect(),
        metrics_address: s.metrics_address.clone(),
        threads: s.threads,
        grace_period_seconds: s.grace_period_seconds,
        otlp_endpoint: s.otlp_endpoint.clone(),
        reload_watch: s.reload_watch,
        upgrade_sock: s.upgrade_sock.clone(),
        write_buffer_bytes: s.write_buffer_bytes,
    })
}

fn origin(cx: &Ctx<'_>, name: &str, o: &OriginSection) -> Result<OriginSpec, ConfigError> {
    let key = format!("origins.{name}");
    let place = match (&o.endpoint, &o.embedded) {
        (Some(ep), None) => {
            let url = url::Url::parse(ep).map_err(|e| {
                cx.err(
                    format!("{key}.endpoint"),
                    format!("{ep:?} is not a URL: {e}"),
                )
            })?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(cx.err(
                    format!("{key}.endpoint"),
                    format!("{ep:?} must be an http:// or https:// URL with a host"),
                ));
            }
            OriginPlace::Remote(url)
        }
        (None, Some(e)) => OriginPlace::Embedded(e.root.clone()),
        _ => return Err(cx.err(&key, "exactly one of endpoint and embedded must be set")),
    };
    let credentials = match &o.credentials {
        CredentialsSection::None => None,
        CredentialsSection::Env {
            access_key_env,
            secret_key_env,
        } => Some((
            cx.secret_env(&format!("{key}.credentials.access_key_env"), access_key_env)?,
            cx.secret_env(&format!("{key}.credentials.secret_key_env"), secret_key_env)?,
        )),
        CredentialsSection::File {
            access_key_file,
            secret_key_file,
        } => Some((
            cx.secret_file(
                &format!("{key}.credentials.access_key_file"),
                access_key_file,
            )?,
            cx.secret_file(
                &format!("{key}.credentials.secret_key_file"),
                secret_key_file,
            )?,
        )),
    };
    if o.max_concurrency == 0 {
        return Err(cx.err(format!("{key}.max_concurrency"), "must be at least 1"));
    }
    let BreakerSection { failures, open_ms } = o.breaker;
    if failures == 0 {
        return Err(cx.err(format!("{key}.breaker.failures"), "must be at least 1"));
    }
    let hedge = o
        .hedge
        .as_ref()
        .map(|h| hedge_policy(cx, &key, h))
        .transpose()?;
    Ok(OriginSpec {
        name: name.to_owned(),
        place,
        region: o.region.clone(),
        addressing: o.addressing,
        credentials,
        max_concurrency: o.max_concurrency,
        retries: o.retries,
        connect_timeout_ms: o.connect_timeout_ms,
        read_timeout_ms: o.read_timeout_ms,
        breaker_failures: failures,
        breaker_open_ms: open_ms,
        hedge,
    })
}

fn hedge_policy(
    cx: &Ctx<'_>,
    key: &str,
    h: &crate::config::file::HedgeSection,
) -> Result<crate::origin::hedge::Policy, ConfigError> {
    if !(50.0..=99.9).contains(&h.percentile) {
        return Err(cx.err(
            format!("{key}.hedge.percentile"),
            format!("{} is outside 50..99.9", h.percentile),
        ));
    }
    if !(h.max_share > 0.0 && h.max_share <= 0.5) {
        return Err(cx.err(
            format!("{key}.hedge.max_share"),
            format!("{} is outside (0, 0.5]", h.max_share),
        ));
    }
    if h.after_ms == Some(0) {
        return Err(cx.err(format!("{key}.hedge.after_ms"), "must be at least 1"));
    }
    Ok(crate::origin::hedge::Policy {
        after: h.after_ms.map(std::time::Duration::from_millis),
        quantile: h.percentile / 100.0,
        max_share: h.max_share,
    })
}
