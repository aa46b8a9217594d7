//! The `fleet:` section of floe-proxy's config: what operators write (unknown keys refused,
//! every default named and explained) and its validation into [`FleetSettings`]. No `fleet:`
//! section: one node, as before.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use floe_core::config::{ConfigCx, ConfigError};
use serde::Deserialize;

/// The top-level keys of a config file this plugin reads (others are ignored here).
#[derive(Debug, Deserialize)]
pub struct FileSections {
    /// The fleet.
    #[serde(default)]
    pub fleet: Option<FleetSection>,
    /// The proxy's admin listener (validated by the proxy; read here for the advertised
    /// admin URL's default).
    #[serde(default)]
    pub admin: Option<AdminPeek>,
}

/// What this plugin reads of the proxy's `admin:` section.
#[derive(Debug, Deserialize)]
pub struct AdminPeek {
    /// `ip:port` it binds.
    pub address: String,
    /// Present when it serves TLS.
    #[serde(default)]
    pub tls: Option<serde::de::IgnoredAny>,
}

/// How this node joins a fleet.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetSection {
    /// This node's stable id. Default: the `HOSTNAME` environment variable, which is the pod
    /// name in a StatefulSet (stable across restarts, so a restarted node owns what it owned).
    #[serde(default)]
    pub node_id: Option<String>,
    /// The address other nodes reach this node at, `host:port`: the peer API listens on its
    /// TCP port and gossip on the same UDP port. Required. `${NAME}` is replaced by the
    /// environment variable NAME, so one file serves every pod of a StatefulSet (e.g.
    /// `${POD_IP}:9200`, the pod IP from the downward API).
    pub peer_address: String,
    /// Where to bind both. Default: `peer_address` (in a pod, set `0.0.0.0:<port>`).
    #[serde(default)]
    pub bind: Option<String>,
    /// The admin API's URL as floe-control reaches it (gossiped, so the control plane follows
    /// the fleet's membership). Default: `peer_address`'s host with the `admin:` listener's
    /// port (https when it serves TLS); none without an `admin:` section.
    #[serde(default)]
    pub admin_url: Option<String>,
    /// Other nodes' `peer_address`es to gossip with first. Default none.
    #[serde(default)]
    pub seeds: Vec<String>,
    /// A DNS name (`name:port`) whose addresses are seeds, re-resolved periodically (a
    /// Kubernetes headless service). Default none. One of `seeds` or `dns` is needed unless the
    /// fleet is this node alone.
    #[serde(default)]
    pub dns: Option<String>,
    /// Environment variable holding the fleet secret (at least 16 bytes), which authenticates
    /// gossip and the peer API. Required.
    pub secret_env: String,
    /// Advertised capacity in bytes (the node's NVMe cache size): the node's weight in
    /// ownership. Default 100 GiB, so nodes that leave it out weigh the same.
    #[serde(default = "default_capacity")]
    pub capacity_bytes: u64,
    /// The node's zone; owners in the asker's zone are preferred when zones are set. Default "".
    #[serde(default)]
    pub zone: String,
    /// Name shared by one fleet's nodes; gossip from another cluster id is ignored. Default
    /// "floe".
    #[serde(default = "default_cluster")]
    pub cluster_id: String,
    /// Gossip round interval. Default 200 ms: with `phi_threshold` 8 a dead node leaves the
    /// live view in about 8 intervals (~1.6 s), inside the 3 s the fleet promises.
    #[serde(default = "default_gossip_ms")]
    pub gossip_interval_ms: u64,
    /// Failure detector threshold (elapsed / mean heartbeat interval). Default 8.
    #[serde(default = "default_phi")]
    pub phi_threshold: f64,
    /// How long an asker waits for a peer to connect and begin its answer before it fills from
    /// the origin itself. Default 500 ms: above a loaded peer's worst fill start, below what a
    /// client notices on a cold read.
    #[serde(default = "default_peer_timeout_ms")]
    pub peer_timeout_ms: u64,
    /// After it starts, how long a node asks a block's previous owner (cached only) before the
    /// origin when it misses a block it now owns: the warmth it took over moves to it as it is
    /// read. Default 600000 ms (10 min): longer than a dashboard refresh cycle, short enough
    /// that the extra peer round trip on true misses stops soon.
    #[serde(default = "default_warm_window_ms")]
    pub warm_window_ms: u64,
    /// Asks an owner fills from the origin at once before it refuses more as busy, and the
    /// next rendezvous choice serves them (bounded load). Default 64: beyond that an owner's
    /// origin link, not the fleet, is the bottleneck.
    #[serde(default = "default_max_owner_fills")]
    pub max_owner_fills: usize,
    /// Pace of warmth hand-over pulls (a node joining, or taking over a draining node's
    /// blocks), bytes per second. Default 134217728 (128 MiB/s): about a tenth of a 10 GbE
    /// link, so a hand-over never crowds out client traffic.
    #[serde(default = "default_handover_rate")]
    pub handover_bytes_per_sec: u64,
    /// Most blocks pulled from one giver per bucket in one hand-over. Default 8192 (16 GiB of
    /// 2 MiB blocks): the hottest part of a node's cache; colder blocks move on demand.
    #[serde(default = "default_handover_blocks")]
    pub handover_max_blocks: usize,
    /// TLS for the peer API (gossip stays HMAC-authenticated UDP). Default none: plain HTTP,
    /// authenticated by the fleet secret; set it when the peer network is not private.
    #[serde(default)]
    pub tls: Option<PeerTlsSection>,
}

/// `fleet.tls`: every node serves the peer API with `cert`/`key` and trusts peers signed by
/// `ca` (their certificates must name the host of their `peer_address`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerTlsSection {
    /// PEM certificate chain.
    pub cert: String,
    /// PEM private key.
    pub key: String,
    /// PEM of the CA that signs the fleet's certificates.
    pub ca: String,
}

/// Validated peer TLS files.
#[derive(Debug, Clone)]
pub struct PeerTls {
    /// Certificate chain path.
    pub cert: String,
    /// Key path.
    pub key: String,
    /// CA path.
    pub ca: String,
}

fn default_capacity() -> u64 {
    100 << 30
}
fn default_cluster() -> String {
    "floe".into()
}
fn default_gossip_ms() -> u64 {
    200
}
fn default_phi() -> f64 {
    8.0
}
fn default_peer_timeout_ms() -> u64 {
    500
}
fn default_warm_window_ms() -> u64 {
    600_000
}
fn default_max_owner_fills() -> usize {
    64
}
fn default_handover_rate() -> u64 {
    128 << 20
}
fn default_handover_blocks() -> usize {
    8192
}

/// A validated `fleet:` section.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    /// This node's id.
    pub node_id: String,
    /// Advertised `host:port`.
    pub peer_address: String,
    /// Bound address (TCP peer API and UDP gossip).
    pub bind: SocketAddr,
    /// Advertised admin URL ("" when none).
    pub admin_url: String,
    /// Advertised gossip address (UDP).
    pub gossip_advertise: SocketAddr,
    /// Seed `host:port`s (static and DNS).
    pub seeds: Vec<String>,
    /// The fleet secret.
    pub secret: Vec<u8>,
    /// Weight.
    pub capacity_bytes: u64,
    /// Zone.
    pub zone: String,
    /// Cluster id.
    pub cluster_id: String,
    /// Gossip interval.
    pub gossip_interval: Duration,
    /// Failure detector threshold.
    pub phi_threshold: f64,
    /// Peer connect and first-byte timeout.
    pub peer_timeout: Duration,
    /// Warming window after start.
    pub warm_window: Duration,
    /// Bounded load threshold.
    pub max_owner_fills: usize,
    /// Hand-over pace, bytes per second.
    pub handover_bytes_per_sec: u64,
    /// Hand-over size, blocks per giver and bucket.
    pub handover_max_blocks: usize,
    /// Peer API TLS.
    pub tls: Option<PeerTls>,
}

/// `text` with each `${NAME}` replaced by the environment variable NAME; an unset or empty
/// one is an error naming `key` and NAME.
fn expand_env(cx: &ConfigCx<'_>, key: &str, text: &str) -> Result<String, ConfigError> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let j = after
            .find('}')
            .ok_or_else(|| cx.err(key, format!("{text:?}: '${{' without a closing '}}'")))?;
        let name = &after[..j];
        let value = (cx.env)(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| cx.err(key, format!("{text:?} names ${{{name}}}, which is not set")))?;
        out.push_str(&value);
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn socket(cx: &ConfigCx<'_>, key: &str, addr: &str) -> Result<SocketAddr, ConfigError> {
    addr.to_socket_addrs()
        .map_err(|e| cx.err(key, format!("{addr:?} is not a host:port: {e}")))?
        .next()
        .ok_or_else(|| cx.err(key, format!("{addr:?} resolves to no address")))
}

/// The admin URL other processes reach: `admin_url`, or `peer_address`'s host with the admin
/// listener's port.
fn admin_url(
    cx: &ConfigCx<'_>,
    s: &FleetSection,
    admin: Option<&AdminPeek>,
) -> Result<String, ConfigError> {
    if let Some(u) = &s.admin_url {
        let ok = (u.starts_with("http://") || u.starts_with("https://")) && url_host_port(u);
        if !ok {
            return Err(cx.err(
                "fleet.admin_url",
                format!("{u:?} is not an http(s)://host:port URL"),
            ));
        }
        return Ok(u.trim_end_matches('/').to_owned());
    }
    let Some(a) = admin else {
        return Ok(String::new());
    };
    let port = a.address.rsplit_once(':').map(|(_, p)| p).unwrap_or("");
    let host = s
        .peer_address
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or("");
    let scheme = if a.tls.is_some() { "https" } else { "http" };
    Ok(format!("{scheme}://{host}:{port}"))
}

fn url_host_port(u: &str) -> bool {
    let rest = u
        .split_once("://")
        .map_or("", |(_, r)| r)
        .trim_end_matches('/');
    rest.rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
}

/// Validates the section (`admin`: the proxy's admin listener, when it has one).
pub fn validate(cx: &ConfigCx<'_>, s: &FleetSection) -> Result<FleetSettings, ConfigError> {
    validate_with(cx, s, None)
}

/// As [`validate`], with the proxy's admin listener.
pub fn validate_with(
    cx: &ConfigCx<'_>,
    s: &FleetSection,
    admin: Option<&AdminPeek>,
) -> Result<FleetSettings, ConfigError> {
    let s = &FleetSection {
        peer_address: expand_env(cx, "fleet.peer_address", &s.peer_address)?,
        ..s.clone()
    };
    let node_id = match &s.node_id {
        Some(id) => id.clone(),
        None => (cx.env)("HOSTNAME").unwrap_or_default(),
    };
    if node_id.is_empty() || node_id.len() > 253 || node_id.chars().any(char::is_whitespace) {
        return Err(cx.err(
            "fleet.node_id",
            "set a stable node id (1-253 characters, no spaces) here or in HOSTNAME",
        ));
    }
    let gossip_advertise = socket(cx, "fleet.peer_address", &s.peer_address)?;
    if gossip_advertise.ip().is_unspecified() {
        return Err(cx.err(
            "fleet.peer_address",
            "must be an address other nodes can reach, not 0.0.0.0 (bind: takes that)",
        ));
    }
    let bind = match &s.bind {
        Some(b) => socket(cx, "fleet.bind", b)?,
        None => gossip_advertise,
    };
    let mut seeds = Vec::new();
    for (i, seed) in s.seeds.iter().enumerate() {
        socket(cx, &format!("fleet.seeds[{i}]"), seed)?;
        seeds.push(seed.clone());
    }
    if let Some(d) = &s.dns {
        let ok = d
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !ok {
            return Err(cx.err("fleet.dns", format!("{d:?} is not a name:port")));
        }
        seeds.push(d.clone());
    }
    let secret = cx.secret_env("fleet.secret_env", &s.secret_env)?;
    if secret.len() < 16 {
        return Err(cx.err(
            "fleet.secret_env",
            "the fleet secret needs at least 16 bytes",
        ));
    }
    if s.capacity_bytes == 0 {
        return Err(cx.err("fleet.capacity_bytes", "must be above 0"));
    }
    if !(10..=10_000).contains(&s.gossip_interval_ms) {
        return Err(cx.err("fleet.gossip_interval_ms", "must be 10-10000"));
    }
    if !(1.0..=100.0).contains(&s.phi_threshold) {
        return Err(cx.err("fleet.phi_threshold", "must be 1-100"));
    }
    if !(10..=60_000).contains(&s.peer_timeout_ms) {
        return Err(cx.err("fleet.peer_timeout_ms", "must be 10-60000"));
    }
    Ok(FleetSettings {
        admin_url: admin_url(cx, s, admin)?,
        node_id,
        peer_address: s.peer_address.clone(),
        bind,
        gossip_advertise,
        seeds,
        secret: secret.into_bytes(),
        capacity_bytes: s.capacity_bytes,
        zone: s.zone.clone(),
        cluster_id: s.cluster_id.clone(),
        gossip_interval: Duration::from_millis(s.gossip_interval_ms),
        phi_threshold: s.phi_threshold,
        peer_timeout: Duration::from_millis(s.peer_timeout_ms),
        warm_window: Duration::from_millis(s.warm_window_ms),
        max_owner_fills: s.max_owner_fills.max(1),
        handover_bytes_per_sec: s.handover_bytes_per_sec.max(1),
        handover_max_blocks: s.handover_max_blocks,
        tls: match &s.tls {
            None => None,
            Some(t) => {
                for (k, path) in [("cert", &t.cert), ("key", &t.key), ("ca", &t.ca)] {
                    std::fs::metadata(path)
                        .map_err(|e| cx.err(format!("fleet.tls.{k}"), format!("{path}: {e}")))?;
                }
                Some(PeerTls {
                    cert: t.cert.clone(),
                    key: t.key.clone(),
                    ca: t.ca.clone(),
                })
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FleetSettings, ConfigError> {
        let env = |v: &str| match v {
            "SECRET" => Some("0123456789abcdef0123".to_owned()),
            "SHORT" => Some("abc".to_owned()),
            "POD_IP" => Some("10.1.2.3".to_owned()),
            _ => None,
        };
        let cx = ConfigCx {
            file: "floe.yaml",
            env: &env,
        };
        let raw: FileSections =
            serde_saphyr::from_str(text).map_err(|e| cx.err("(yaml)", e.to_string()))?;
        let fleet = raw
            .fleet
            .as_ref()
            .ok_or_else(|| cx.err("fleet", "absent"))?;
        validate_with(&cx, fleet, raw.admin.as_ref())
    }

    #[test]
    fn the_admin_url_is_the_peer_host_with_the_admin_port() {
        let s = parse(
            "fleet: {node_id: a, peer_address: '10.0.0.5:9200', secret_env: SECRET}\n\
             admin: {address: '0.0.0.0:9101', token: t}",
        )
        .unwrap();
        assert_eq!(s.admin_url, "http://10.0.0.5:9101");
        let s = parse(
            "fleet: {node_id: a, peer_address: '10.0.0.5:9200', secret_env: SECRET, \
             admin_url: 'https://floe-0.floe:9101/'}",
        )
        .unwrap();
        assert_eq!(s.admin_url, "https://floe-0.floe:9101");
        let e = parse(
            "fleet: {node_id: a, peer_address: '10.0.0.5:9200', secret_env: SECRET, admin_url: x}",
        )
        .unwrap_err();
        assert_eq!(e.key, "fleet.admin_url");
    }

    #[test]
    fn the_peer_address_takes_environment_variables_so_one_file_serves_every_pod() {
        let s = parse("fleet: {node_id: a, peer_address: '${POD_IP}:9200', secret_env: SECRET}")
            .unwrap();
        assert_eq!(s.peer_address, "10.1.2.3:9200");
        assert_eq!(s.gossip_advertise.to_string(), "10.1.2.3:9200");
        for text in ["'${NOPE}:9200'", "'${POD_IP:9200'"] {
            let e = parse(&format!(
                "fleet: {{node_id: a, peer_address: {text}, secret_env: SECRET}}"
            ))
            .unwrap_err();
            assert_eq!(e.key, "fleet.peer_address", "{e}");
        }
    }

    #[test]
    fn a_minimal_section_takes_the_named_defaults() {
        let s = parse("fleet: {node_id: a, peer_address: '127.0.0.1:9200', secret_env: SECRET}")
            .unwrap();
        assert_eq!(s.capacity_bytes, 100 << 30);
        assert_eq!(s.gossip_interval, Duration::from_millis(200));
        assert_eq!(s.bind, s.gossip_advertise);
        assert_eq!(s.cluster_id, "floe");
    }

    #[test]
    fn the_broken_fixture_names_file_key_and_reason() {
        let text = include_str!("../../../conf/testdata/fleet-wrongkey.yaml");
        let e = parse(text).unwrap_err();
        assert_eq!(e.file, "floe.yaml");
        assert!(e.reason.contains("seed"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("fleet: {node_id: 'a b', peer_address: '127.0.0.1:1', secret_env: SECRET}", "fleet.node_id"),
            ("fleet: {node_id: a, peer_address: '0.0.0.0:1', secret_env: SECRET}", "fleet.peer_address"),
            ("fleet: {node_id: a, peer_address: 'nope', secret_env: SECRET}", "fleet.peer_address"),
            ("fleet: {node_id: a, peer_address: '127.0.0.1:1', secret_env: SHORT}", "fleet.secret_env"),
            ("fleet: {node_id: a, peer_address: '127.0.0.1:1', secret_env: UNSET}", "fleet.secret_env"),
            ("fleet: {node_id: a, peer_address: '127.0.0.1:1', secret_env: SECRET, seeds: [x]}", "fleet.seeds[0]"),
            ("fleet: {node_id: a, peer_address: '127.0.0.1:1', secret_env: SECRET, dns: svc}", "fleet.dns"),
            ("fleet: {node_id: a, peer_address: '127.0.0.1:1', secret_env: SECRET, capacity_bytes: 0}", "fleet.capacity_bytes"),
            ("fleet: {node_id: a, peer_address: '127.0.0.1:1', secret_env: SECRET, tls: {cert: /nonexistent.pem, key: /k, ca: /c}}", "fleet.tls.cert"),
        ];
        for (text, key) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }
}
