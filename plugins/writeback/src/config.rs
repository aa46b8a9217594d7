//! Write-back's config: a route's `writeback:` (its coding geometry and acknowledgment
//! threshold) and the top-level `writeback:` (where this node keeps fragments and journal, and
//! how much). What operators write is checked here, unknown keys refused, every default named.

use std::collections::BTreeMap;
use std::path::PathBuf;

use floe_core::config::{ConfigCx, ConfigError};
use serde::Deserialize;

/// The keys of a config file this plugin reads (others are ignored here).
#[derive(Debug, Deserialize)]
pub struct FileSections {
    /// This node's fragment store.
    #[serde(default)]
    pub writeback: Option<NodeSection>,
    /// Routes, for their `writeback:` options.
    #[serde(default)]
    pub routes: Vec<RoutePeek>,
}

/// What this plugin reads of a route.
#[derive(Debug, Deserialize)]
pub struct RoutePeek {
    /// The route's bucket.
    pub bucket: String,
    /// Its write-back options.
    #[serde(default)]
    pub writeback: Option<RouteSection>,
}

/// A route's `writeback:`: how its PUTs are coded and when they are acknowledged.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Data fragments per stripe. Default 4: each node stores a quarter of the object.
    #[serde(default = "default_k")]
    pub k: u8,
    /// Parity fragments per stripe. Default 2: any two fragments may be lost.
    #[serde(default = "default_m")]
    pub m: u8,
    /// Durable fragments counted before the client hears 200, k <= w <= k+m. Default k+1: an
    /// acknowledged write survives the loss of any one node (like two full copies, at
    /// (k+1)/k of the bytes); set k+m to survive m.
    #[serde(default)]
    pub w: Option<u8>,
    /// Larger PUTs go straight to the origin. Default 536870912 (512 MiB): Iceberg data files
    /// are far below it; staging one must not take a large share of the fleet's ceiling.
    #[serde(default = "default_max_object")]
    pub max_object_bytes: u64,
    /// Object bytes coded at a time. Default 1048576 (1 MiB): the fastest encode measured
    /// (load/PERFORMANCE.md) and the memory one PUT holds.
    #[serde(default = "default_stripe")]
    pub stripe_bytes: u32,
}

fn default_k() -> u8 {
    4
}
fn default_m() -> u8 {
    2
}
fn default_max_object() -> u64 {
    512 << 20
}
fn default_stripe() -> u32 {
    1 << 20
}

/// The top-level `writeback:`: this node's fragment store and journal.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// Directory for fragments and journal records (on the NVMe that also holds the cache).
    pub dir: String,
    /// Ceiling of fragment bytes this node keeps for the fleet. Default 10737418240 (10 GiB):
    /// minutes of writes at NVMe speed, hours of an origin outage at a typical ingest rate.
    #[serde(default = "default_capacity")]
    pub capacity_bytes: u64,
    /// Origin uploads running at once. Default 4: propagation must not crowd out reads.
    #[serde(default = "default_propagators")]
    pub propagate_concurrency: usize,
    /// Longest wait between retries of a failed origin upload (backoff doubles from 250 ms).
    /// Default 30000 (30 s): an origin back from an outage is used within half a minute.
    #[serde(default = "default_retry_max")]
    pub retry_max_ms: u64,
    /// How often every fragment of a staged write is read and its CRCs checked (corrupt ones
    /// are rebuilt). Default 600000 (10 min): a write is usually propagated and freed sooner;
    /// the scrub guards the ones an origin outage keeps.
    #[serde(default = "default_scrub")]
    pub scrub_interval_ms: u64,
    /// How long a fragment's node may be gone before the fragment is rebuilt on another node.
    /// Default 10000 (10 s): longer than a restart's gossip gap, short next to a lost node.
    #[serde(default = "default_grace")]
    pub repair_grace_ms: u64,
    /// How old a fragment no journal and no open upload in the fleet names must be before a
    /// scrub removes it (the leftovers of a write whose coordinator died before acknowledging
    /// it), and how long a multipart upload may stay open before the scrub aborts it. Default
    /// 604800000 (7 days, a common AbortIncompleteMultipartUpload rule).
    #[serde(default = "default_orphan")]
    pub orphan_after_ms: u64,
}

fn default_orphan() -> u64 {
    604_800_000
}

fn default_scrub() -> u64 {
    600_000
}
fn default_grace() -> u64 {
    10_000
}

fn default_capacity() -> u64 {
    10 << 30
}
fn default_propagators() -> usize {
    4
}
fn default_retry_max() -> u64 {
    30_000
}

/// A route's validated options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteOptions {
    /// Data fragments.
    pub k: u8,
    /// Parity fragments.
    pub m: u8,
    /// Acknowledgment threshold.
    pub w: u8,
    /// Largest staged PUT.
    pub max_object_bytes: u64,
    /// Stripe size.
    pub stripe_bytes: u32,
}

/// The validated node settings.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Fragments directory.
    pub fragments: PathBuf,
    /// Journal directory.
    pub journal: PathBuf,
    /// Multipart uploads in progress (see [`crate::upload_files`]).
    pub uploads: PathBuf,
    /// Fragment ceiling.
    pub capacity_bytes: u64,
    /// Concurrent uploads.
    pub propagate_concurrency: usize,
    /// Retry ceiling.
    pub retry_max_ms: u64,
    /// Scrub interval.
    pub scrub_interval_ms: u64,
    /// Repair grace.
    pub repair_grace_ms: u64,
    /// Orphan age.
    pub orphan_after_ms: u64,
}

/// Everything write-back was configured with.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The node section (none: no route may use write-back).
    pub node: Option<NodeSettings>,
    /// Options by route bucket.
    pub routes: BTreeMap<String, RouteOptions>,
}

/// Validates a route's options (`key`: where they are, e.g. `routes[1].writeback`).
pub fn validate_route(
    cx: &ConfigCx<'_>,
    key: &str,
    s: &RouteSection,
) -> Result<RouteOptions, ConfigError> {
    if s.k == 0 || s.m == 0 {
        return Err(cx.err(key, "k and m must be at least 1"));
    }
    if u16::from(s.k) + u16::from(s.m) > 32 {
        return Err(cx.err(key, "k + m must be at most 32 (one fragment per node)"));
    }
    let w = s.w.unwrap_or(s.k + 1);
    if w < s.k || w > s.k + s.m {
        return Err(cx.err(
            format!("{key}.w"),
            format!("must be between k ({}) and k + m ({})", s.k, s.k + s.m),
        ));
    }
    if !(64 << 10..=64 << 20).contains(&s.stripe_bytes) {
        return Err(cx.err(format!("{key}.stripe_bytes"), "must be 64 KiB to 64 MiB"));
    }
    if s.max_object_bytes == 0 {
        return Err(cx.err(format!("{key}.max_object_bytes"), "must be above 0"));
    }
    Ok(RouteOptions {
        k: s.k,
        m: s.m,
        w,
        max_object_bytes: s.max_object_bytes,
        stripe_bytes: s.stripe_bytes,
    })
}

/// Validates the file's write-back sections.
pub fn validate(cx: &ConfigCx<'_>, raw: &FileSections) -> Result<Settings, ConfigError> {
    let node = match &raw.writeback {
        None => None,
        Some(n) => {
            if n.dir.is_empty() {
                return Err(cx.err("writeback.dir", "must name a directory"));
            }
            if n.capacity_bytes < 64 << 20 {
                return Err(cx.err("writeback.capacity_bytes", "must be at least 64 MiB"));
            }
            if n.propagate_concurrency == 0 {
                return Err(cx.err("writeback.propagate_concurrency", "must be above 0"));
            }
            let dir = PathBuf::from(&n.dir);
            Some(NodeSettings {
                fragments: dir.join("fragments"),
                journal: dir.join("journal"),
                uploads: dir.join("uploads"),
                capacity_bytes: n.capacity_bytes,
                propagate_concurrency: n.propagate_concurrency,
                retry_max_ms: n.retry_max_ms.max(250),
                scrub_interval_ms: n.scrub_interval_ms.max(100),
                repair_grace_ms: n.repair_grace_ms,
                orphan_after_ms: n.orphan_after_ms.max(1000),
            })
        }
    };
    let mut routes = BTreeMap::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let Some(w) = &r.writeback else { continue };
        let key = format!("routes[{i}].writeback");
        if node.is_none() {
            return Err(cx.err(
                key,
                "needs the top-level writeback: section (where fragments are kept)",
            ));
        }
        routes.insert(r.bucket.clone(), validate_route(cx, &key, w)?);
    }
    Ok(Settings { node, routes })
}

/// Parses and validates the write-back sections of config text.
pub fn parse(cx: &ConfigCx<'_>, text: &str) -> Result<Settings, ConfigError> {
    let raw: FileSections =
        serde_saphyr::from_str(text).map_err(|e| cx.err("(yaml)", e.to_string()))?;
    validate(cx, &raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> Result<Settings, ConfigError> {
        let env = |_: &str| None;
        let cx = ConfigCx {
            file: "floe.yaml",
            env: &env,
        };
        parse(&cx, text)
    }

    #[test]
    fn a_bare_route_option_takes_the_named_defaults() {
        let s = run("writeback: {dir: /x}\nroutes: [{bucket: b, writeback: {}}]").unwrap();
        let o = s.routes["b"];
        assert_eq!((o.k, o.m, o.w, o.stripe_bytes), (4, 2, 5, 1 << 20));
        let n = s.node.unwrap();
        assert_eq!(n.fragments, PathBuf::from("/x/fragments"));
        assert_eq!(n.capacity_bytes, 10 << 30);
    }

    #[test]
    fn the_broken_fixture_names_file_key_and_reason() {
        let text = include_str!("../../../conf/testdata/writeback-wrongkey.yaml");
        let e = run(text).unwrap_err();
        assert_eq!(e.file, "floe.yaml");
        assert!(e.reason.contains("parity"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (
                "writeback: {dir: /x}\nroutes: [{bucket: b, writeback: {k: 4, m: 2, w: 7}}]",
                "routes[0].writeback.w",
            ),
            (
                "writeback: {dir: /x}\nroutes: [{bucket: b, writeback: {k: 4, m: 2, w: 3}}]",
                "routes[0].writeback.w",
            ),
            (
                "writeback: {dir: /x}\nroutes: [{bucket: b, writeback: {m: 0}}]",
                "routes[0].writeback",
            ),
            (
                "writeback: {dir: /x}\nroutes: [{bucket: b, writeback: {k: 30, m: 3}}]",
                "routes[0].writeback",
            ),
            (
                "writeback: {dir: /x}\nroutes: [{bucket: b, writeback: {stripe_bytes: 100}}]",
                "routes[0].writeback.stripe_bytes",
            ),
            (
                "routes: [{bucket: b, writeback: {}}]",
                "routes[0].writeback",
            ),
            (
                "writeback: {dir: /x, capacity_bytes: 1}",
                "writeback.capacity_bytes",
            ),
        ];
        for (text, key) in cases {
            let e = run(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }
}
