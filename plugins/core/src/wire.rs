//! The admin API's wire contract, defined once: the query forms and JSON documents of the
//! cache's admin endpoints, written by floe-proxy (floe-blocks' admin.rs) and read by
//! floe-control (its node client). A field renamed here changes both sides at once.

use serde::{Deserialize, Serialize};

/// Response header of `GET /object`: the object's size.
pub const OBJECT_SIZE: &str = "x-floe-object-size";
/// Response header of `GET /object`: the object offset of the first byte returned.
pub const FIRST_BYTE: &str = "x-floe-first-byte";

/// Which store of the cache bytes land in (`store=` in queries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreName {
    /// metadata.json, manifests, footers.
    Metadata,
    /// Column chunks.
    Data,
}

impl StoreName {
    /// The query form.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreName::Metadata => "metadata",
            StoreName::Data => "data",
        }
    }

    /// Parses the query form.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "metadata" => Some(StoreName::Metadata),
            "data" => Some(StoreName::Data),
            _ => None,
        }
    }
}

/// Which bytes of an object a warm or read covers (`range=FIRST-LAST` or `suffix=N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// The whole object.
    Whole,
    /// Bytes `first..=last` (clamped to the object).
    Range(u64, u64),
    /// The last `n` bytes (the whole object when it is shorter).
    Suffix(u64),
}

impl Span {
    /// The query parameter that carries this span, if any.
    pub fn query(self) -> Option<(&'static str, String)> {
        match self {
            Span::Whole => None,
            Span::Range(a, b) => Some(("range", format!("{a}-{b}"))),
            Span::Suffix(n) => Some(("suffix", n.to_string())),
        }
    }

    /// Parses the `range` and `suffix` query parameters.
    pub fn from_query(range: Option<&str>, suffix: Option<&str>) -> Result<Self, &'static str> {
        match (range, suffix) {
            (None, None) => Ok(Span::Whole),
            (Some(r), None) => match r
                .split_once('-')
                .map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>()))
            {
                Some((Ok(a), Ok(b))) if a <= b => Ok(Span::Range(a, b)),
                _ => Err("range must be FIRST-LAST"),
            },
            (None, Some(n)) => match n.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Span::Suffix(n)),
                _ => Err("suffix must be a positive byte count"),
            },
            (Some(_), Some(_)) => Err("give range or suffix, not both"),
        }
    }
}

/// Counters of one store (`GET /stats`); the names say the unit.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatsDoc {
    pub dram_usage_bytes: u64,
    pub dram_capacity_bytes: u64,
    pub disk_capacity_bytes: u64,
    pub disk_write_bytes: u64,
    pub disk_read_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub inserted: u64,
    pub admissions_rejected: u64,
    pub dram_entries: u64,
    pub evictions: u64,
    pub origin_bytes: u64,
    /// Bytes fetched from owner nodes (fleet only).
    #[serde(default)]
    pub peer_bytes: u64,
    /// Bytes of reads' ranges that came from disk-tier pages (`disk_read_bytes` over this is
    /// how much more the disk read than was asked of it).
    #[serde(default)]
    pub disk_served_bytes: u64,
    /// Pages handed to the disk tier's writer.
    #[serde(default)]
    pub disk_pages_written: u64,
    /// Pages not written: the writer's queue was at its bound (disk slower than fills).
    #[serde(default)]
    pub disk_pages_dropped: u64,
}

/// `GET /stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsDoc {
    /// Block geometry.
    pub block_bytes: u64,
    /// Client reads waiting on the origin now (prefetch yields to them).
    pub foreground_misses: u64,
    /// Access records dropped because the queue was full.
    pub accesses_dropped: u64,
    /// The data store.
    pub data: StoreStatsDoc,
    /// The metadata store.
    pub metadata: StoreStatsDoc,
    /// Kept store (pinned tables' files; DRAM only).
    #[serde(default)]
    pub kept: StoreStatsDoc,
    /// Routes' own data stores (`cache.shares`), by bucket.
    #[serde(default)]
    pub shares: std::collections::BTreeMap<String, StoreStatsDoc>,
    /// Column-chunk ranges held for column-chunk fills.
    #[serde(default)]
    pub hint_chunks: u64,
    /// `fill: auto`'s estimate: small reads' judged first touches and those that saw a neighbour,
    /// this window.
    #[serde(default)]
    pub small_reads: (u64, u64),
    /// The block buffer pool.
    #[serde(default)]
    pub buffers: BufferPoolDoc,
    /// When this process's cache opened (Unix ms): a new value means a restart, whose DRAM-only
    /// state (pins, chunk hints, the catalog's classifications) the control plane sends again.
    #[serde(default)]
    pub boot: u64,
}

/// The block buffer pool's counters (in `GET /stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferPoolDoc {
    /// Free bytes held for the next fills.
    pub free_bytes: u64,
    /// Buffers handed out again.
    pub reused: u64,
    /// Buffers allocated because their size class had none free.
    pub fresh: u64,
    /// Buffers freed because the pool was at its bound.
    pub freed: u64,
    /// The caches' DRAM ceilings the pool populates at start (0: not populated).
    #[serde(default)]
    pub reserve_bytes: u64,
    /// Bytes of buffers populated so far.
    #[serde(default)]
    pub populated_bytes: u64,
    /// Where populating stands: `off`, `running`, `done` (the reserve is full) or `stopped`.
    #[serde(default)]
    pub populate: String,
}

/// `POST /warm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmDoc {
    /// Bytes of the blocks warmed.
    pub bytes: u64,
}

/// `POST /chunks` body: one table's column chunks, per live data file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunksBody {
    /// `namespace.table`: the set replaces (with `replace`) what this table published before.
    pub table: String,
    /// Drop the table's earlier files first (the first batch of a commit's live set).
    pub replace: bool,
    /// The files.
    pub files: Vec<FileChunksDoc>,
}

/// One data file's column chunks, compactly: `c` is `[start, len, start, len, ...]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileChunksDoc {
    /// Object key.
    pub k: String,
    /// File size.
    pub s: u64,
    /// Chunk starts and lengths, interleaved.
    pub c: Vec<u64>,
}

/// One served read: bucket, key, ETag, offset, length (a JSON array).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord(pub String, pub String, pub String, pub u64, pub u64);

/// `GET /accesses`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessesDoc {
    /// Records dropped since start (queue full).
    pub dropped: u64,
    /// The records drained.
    pub accesses: Vec<AccessRecord>,
}

/// Any admin error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDoc {
    /// What went wrong.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_round_trip_through_their_query_form() {
        for s in [Span::Whole, Span::Range(3, 9), Span::Suffix(64)] {
            let q = s.query();
            let (r, x) = match &q {
                Some(("range", v)) => (Some(v.as_str()), None),
                Some((_, v)) => (None, Some(v.as_str())),
                None => (None, None),
            };
            assert_eq!(Span::from_query(r, x), Ok(s));
        }
        assert!(Span::from_query(Some("9-3"), None).is_err());
        assert!(Span::from_query(None, Some("0")).is_err());
    }

    #[test]
    fn access_records_are_arrays() {
        let doc = AccessesDoc {
            dropped: 1,
            accesses: vec![AccessRecord("b".into(), "k".into(), "\"e\"".into(), 0, 10)],
        };
        let text = serde_json::to_string(&doc).unwrap();
        assert_eq!(text, r#"{"dropped":1,"accesses":[["b","k","\"e\"",0,10]]}"#);
        assert_eq!(serde_json::from_str::<AccessesDoc>(&text).unwrap(), doc);
    }
}

/// `PUT /kept?bucket=` body: the files of the route's pinned tables, whole (key, size). The
/// set replaces the route's earlier one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptBody {
    /// (key, size) of each pinned file.
    pub keys: Vec<(String, u64)>,
    /// Files pinned in part (some columns): key -> the pinned byte ranges, flat
    /// `[start, len, start, len, ...]`; only the blocks they overlap are kept. A key without
    /// parts is kept whole.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub parts: std::collections::BTreeMap<String, Vec<u64>>,
}

/// `POST /held?bucket=`: the objects whose held bytes are asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldBody {
    /// Object keys.
    pub keys: Vec<String>,
}

/// The answer to `POST /held`: bytes this node holds of each key, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldDoc {
    /// Bytes per key.
    pub bytes: Vec<u64>,
}

/// `PUT /kept` and `GET /kept`: what the node keeps of a route's pinned files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptDoc {
    /// Pinned files of the route.
    pub keys: u64,
    /// Bytes of their blocks this node owns (what it keeps), this route.
    pub owned_bytes: u64,
    /// Bytes every route's pins need here.
    pub pinned_bytes: u64,
    /// Bytes the kept store holds now (every route).
    pub held_bytes: u64,
    /// `cache.pinned_bytes`: the bound of `pinned_bytes`.
    pub bound_bytes: u64,
}
