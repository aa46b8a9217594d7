//! The `cache:` section of floe-proxy's config, owned by this plugin: what operators write
//! (unknown keys refused, every default named and explained) and its validation into
//! [`CacheSettings`]. Errors name the file, key path and reason.

use std::path::Path;

use floe_core::config::{ConfigCx, ConfigError};
use serde::Deserialize;

use crate::cache::{CacheSettings, Fill};
use crate::classify::{iceberg_defaults, Classifier, Rule, Store};
use crate::store::{StoreSettings, REGION_BYTES};

/// The top-level keys of a config file this plugin reads (others are ignored here).
#[derive(Debug, Deserialize)]
pub struct FileSections {
    /// The block cache.
    #[serde(default)]
    pub cache: Option<CacheSection>,
}

/// The block cache (shared by every route that lists `blocks`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    /// Folder of both stores' disk tiers (`data/`, `metadata/` below it).
    pub dir: String,
    /// Block size, 1-8 MiB. Default 2 MiB: DuckDB's 1-2 MiB Parquet ranges fetched 2x less
    /// from S3 with 2 MiB blocks than with 8 MiB in the design's TPC-DS measurement.
    #[serde(default = "default_block_bytes")]
    pub block_bytes: u64,
    /// Suffix of a .parquet file kept in the metadata store. Default 64 KiB: covers typical
    /// footers; the blocks overlapping it are what is stored.
    #[serde(default = "default_footer_bytes")]
    pub footer_bytes: u64,
    /// Data store ceilings.
    pub data: StoreSection,
    /// Metadata store ceilings.
    pub metadata: StoreSection,
    /// Touches a data block needs to be admitted once the data store is under pressure.
    /// Default 2 (second touch): one-touch scans cannot evict the hot set.
    #[serde(default = "default_admission")]
    pub admission_threshold: u8,
    /// What a client read's miss of a data block fetches. `auto` (default): as `range`, and a
    /// small read (shorter than a block) fills its whole block while recent small reads'
    /// neighbours in the same blocks keep coming (one round trip then serves them all). `range` fetches
    /// only the bytes the read needs and keeps them as a span of the block (plus the rest of
    /// the block when a read continues where a cached span ends), so a cold random read costs
    /// the origin what it costs without Floe; `block` fetches whole blocks (read-ahead for
    /// free, up to 2x the cold origin bytes for random ranges). In every mode a read starting
    /// at a column chunk the control plane published fetches on to the chunk's end (at most
    /// 8 MiB). Metadata-store blocks and warms are whole.
    #[serde(default)]
    pub fill: FillSection,
    /// When blocks reach the disk tier, as pages (256 KiB for 2 MiB blocks), each page once.
    /// `once` (default): a whole block's pages when it is stored, a partial block's (range
    /// fills) complete pages when it leaves DRAM; a kill -9 loses the partial blocks still in
    /// DRAM (refetched, never served wrong). `every_insert`: a partial block's complete pages
    /// at each fill as well, so a crash keeps them (no more bytes written: a page on disk is
    /// not written again, only sooner).
    #[serde(default)]
    pub disk_writes: DiskWritesSection,
    /// TTL of mappings of rewritable objects (version-hint.text, unknown files), revalidated
    /// with If-None-Match after it. Default 5000 ms.
    #[serde(default = "default_ttl_ms")]
    pub mutable_ttl_ms: u64,
    /// Classification rules replacing the Iceberg defaults, first match wins.
    #[serde(default)]
    pub rules: Option<Vec<RuleSection>>,
    /// DRAM for the files of pinned tables (the admin API's `PUT /kept`), beside the two stores:
    /// what the node owns of pinned tables is kept here, never evicted by other reads. A pin
    /// that would not fit is refused. Default 0: no room, so every pin is refused (a pinned
    /// byte is a byte nothing else can use; an operator gives it on purpose).
    #[serde(default)]
    pub pinned_bytes: usize,
    /// Routes' shares of the data store's ceilings (per-route quotas): each listed route's
    /// data blocks live in a data store of their own with these ceilings, carved out of
    /// `data`'s (what is left is the shared data store of the routes without a share), so a
    /// route scanning past its share evicts only its own blocks. Metadata and footers stay in
    /// the shared metadata store. Default none: every route shares the data store.
    #[serde(default)]
    pub shares: Vec<ShareSection>,
    /// Whether the DRAM ceilings (the stores', shares' and `pinned_bytes`) are written into
    /// block buffers once at start, by a background worker, and kept for fills. Default true:
    /// a fresh proxy's fills then write into mapped pages instead of fresh ones the kernel
    /// zeroes one fault at a time (a fresh proxy's largest cost on cold small reads). RSS is
    /// at the ceilings from the start rather than once the cache is full; `false` lets it grow
    /// with the cache (e.g. many small test nodes on one machine).
    #[serde(default = "default_populate")]
    pub populate_dram: bool,
}

/// One route's share (`cache.shares[]`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareSection {
    /// The route's bucket.
    pub bucket: String,
    /// Its DRAM, taken from `data.dram_bytes` (at least one block).
    pub dram_bytes: usize,
    /// Its disk, taken from `data.disk_bytes` (at least 64 MiB: four 16 MiB regions).
    pub disk_bytes: usize,
}

/// `cache.fill`.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FillSection {
    /// Range fills; whole blocks for small reads while their neighbours come.
    #[default]
    Auto,
    /// Only the bytes a read needs.
    Range,
    /// Whole blocks.
    Block,
}

/// `cache.disk_writes`.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiskWritesSection {
    /// Whole blocks' pages when stored, partial blocks' complete pages when they leave DRAM.
    #[default]
    Once,
    /// Complete pages at every insert.
    EveryInsert,
}

/// DRAM and disk ceilings of one store, in bytes.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// DRAM ceiling.
    pub dram_bytes: usize,
    /// Disk ceiling (at least 64 MiB: four 16 MiB regions).
    pub disk_bytes: usize,
}

/// A classification rule.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleSection {
    /// Glob over the object key.
    pub pattern: String,
    /// `metadata` or `data`.
    pub store: String,
    /// Never rewritten under this name.
    pub immutable: bool,
}

fn default_block_bytes() -> u64 {
    2 << 20
}

fn default_footer_bytes() -> u64 {
    64 << 10
}

fn default_admission() -> u8 {
    2
}

fn default_populate() -> bool {
    true
}

fn default_ttl_ms() -> u64 {
    5000
}

/// Validates the `cache:` section into runtime settings.
pub fn validate(cx: &ConfigCx<'_>, c: &CacheSection) -> Result<CacheSettings, ConfigError> {
    if !((1 << 20)..=(8 << 20)).contains(&c.block_bytes) {
        return Err(cx.err(
            "cache.block_bytes",
            format!("{} is outside 1 MiB..8 MiB", c.block_bytes),
        ));
    }
    let store = |name: &str, s: &StoreSection| -> Result<StoreSettings, ConfigError> {
        if s.dram_bytes < c.block_bytes as usize {
            return Err(cx.err(
                format!("cache.{name}.dram_bytes"),
                "must hold at least one block",
            ));
        }
        if s.disk_bytes < 4 * REGION_BYTES {
            return Err(cx.err(
                format!("cache.{name}.disk_bytes"),
                format!("must be at least {} (four disk regions)", 4 * REGION_BYTES),
            ));
        }
        Ok(StoreSettings {
            dram_bytes: s.dram_bytes,
            disk_bytes: s.disk_bytes,
            disk_dir: Path::new(&c.dir).join(name),
            write_every_insert: c.disk_writes == DiskWritesSection::EveryInsert,
        })
    };
    let rules = match &c.rules {
        None => iceberg_defaults(),
        Some(list) => {
            let mut out = Vec::new();
            for (i, r) in list.iter().enumerate() {
                let st = match r.store.as_str() {
                    "metadata" => Store::Metadata,
                    "data" => Store::Data,
                    other => {
                        return Err(cx.err(
                            format!("cache.rules[{i}].store"),
                            format!("{other:?} is not metadata or data"),
                        ))
                    }
                };
                out.push(Rule {
                    pattern: r.pattern.clone(),
                    store: st,
                    immutable: r.immutable,
                });
            }
            out
        }
    };
    Classifier::new(rules.clone()).map_err(|e| cx.err("cache.rules", e.to_string()))?;
    if c.pinned_bytes != 0 && c.pinned_bytes < c.block_bytes as usize {
        return Err(cx.err(
            "cache.pinned_bytes",
            "must be 0 (no pins) or hold at least one block",
        ));
    }
    let (data, shares) = crate::shares::carve(cx, c, store("data", &c.data)?)?;
    Ok(CacheSettings {
        block_bytes: c.block_bytes,
        footer_bytes: c.footer_bytes,
        data,
        shares,
        meta: store("metadata", &c.metadata)?,
        kept_bytes: c.pinned_bytes,
        admission_threshold: c.admission_threshold,
        mutable_ttl: std::time::Duration::from_millis(c.mutable_ttl_ms),
        rules,
        max_run_blocks: 16,
        fill: match c.fill {
            FillSection::Auto => Fill::Auto,
            FillSection::Range => Fill::Range,
            FillSection::Block => Fill::Block,
        },
        populate_dram: c.populate_dram,
    })
}
