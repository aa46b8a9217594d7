//! A deterministic test bed for the block cache: a real [`BlockCache`] (foyer, DRAM and a disk
//! tier in a temporary folder) in front of the scripted [`MemOrigin`], driven through the same
//! `open` + `stream` steps the filter runs for a client GET, without a Pingora session.

pub mod origin;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use floe_core::conditions::Conditions;
use floe_core::{BucketName, ObjectKey, S3Error, S3Op};
use floe_filter::FilterCtx;

use crate::cache::{BlockCache, CacheSettings, Fill};
use crate::classify::{Rule, Store};
use crate::filter::BlockFilter;
use crate::serve::Ask;
use crate::store::{StoreSettings, REGION_BYTES};
use crate::tap::{ServeError, Sink};
use origin::MemOrigin;

/// Block size of the bed: small, so objects of a few blocks stay small.
pub const BS: u64 = 64 << 10;
pub const BUCKET: &str = "bed";

/// Keys under `data/` are immutable data, `meta/` immutable metadata, anything else mutable
/// data.
fn rules() -> Vec<Rule> {
    let r = |p: &str, store, immutable| Rule {
        pattern: p.to_owned(),
        store,
        immutable,
    };
    vec![
        r("data/**", Store::Data, true),
        r("meta/**", Store::Metadata, true),
        r("**", Store::Data, false),
    ]
}

/// The settings of a bed whose data store holds `data_dram` bytes in DRAM.
pub fn settings(dir: &std::path::Path, data_dram: usize) -> CacheSettings {
    let store = |name: &str, dram: usize| StoreSettings {
        dram_bytes: dram,
        disk_bytes: 4 * REGION_BYTES,
        disk_dir: dir.join(name),
        write_every_insert: false,
    };
    CacheSettings {
        block_bytes: BS,
        footer_bytes: 0,
        data: store("data", data_dram),
        meta: store("metadata", 8 << 20),
        shares: Vec::new(),
        kept_bytes: 4 << 20,
        admission_threshold: 2,
        mutable_ttl: Duration::from_secs(5),
        rules: rules(),
        max_run_blocks: 16,
        populate_dram: false,
        fill: Fill::Range,
    }
}

/// A cache, an origin and the route's filter.
pub struct Bed {
    pub cache: Arc<BlockCache>,
    pub origin: Arc<MemOrigin>,
    pub filter: BlockFilter,
    pub dir: tempfile::TempDir,
}

impl Bed {
    /// A bed with default settings.
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 8 << 20);
        Self::with(dir, s, Arc::new(MemOrigin::default())).await
    }

    /// A bed over `dir` (kept or new) with `settings` and `origin`.
    pub async fn with(dir: tempfile::TempDir, s: CacheSettings, origin: Arc<MemOrigin>) -> Self {
        Self::placed(dir, s, origin, Arc::new(crate::OneNode)).await
    }

    /// A bed whose runs are split by `split`.
    pub async fn placed(
        dir: tempfile::TempDir,
        s: CacheSettings,
        origin: Arc<MemOrigin>,
        split: Arc<dyn crate::RunSplit>,
    ) -> Self {
        let cache = BlockCache::open_with(s, split).await.unwrap();
        let filter = BlockFilter::new(cache.clone(), origin.clone(), BUCKET);
        Self {
            cache,
            origin,
            filter,
            dir,
        }
    }

    /// Closes the cache (flushing its disk tiers) and hands back the folder and origin.
    pub async fn close(self) -> (tempfile::TempDir, Arc<MemOrigin>) {
        self.cache.settle().await;
        self.cache.data.close().await.unwrap();
        self.cache.meta.close().await.unwrap();
        (self.dir, self.origin)
    }

    /// A GET of `key` with an optional Range header, as a client would send it.
    pub async fn get(&self, key: &str, range: Option<&str>) -> Result<Read, S3Error> {
        self.get_into(key, range, &mut Collect::default()).await
    }

    /// A GET whose body goes to `sink`.
    pub async fn get_into(
        &self,
        key: &str,
        range: Option<&str>,
        sink: &mut Collect,
    ) -> Result<Read, S3Error> {
        self.read(S3Op::GetObject, key, range, &Conditions::default(), sink)
            .await
    }

    /// A GET (or HEAD, `op`) with the conditional headers `conditions`, as a client sends
    /// them.
    pub async fn get_if(
        &self,
        op: S3Op,
        key: &str,
        range: Option<&str>,
        conditions: &[(&str, &str)],
    ) -> Result<Read, S3Error> {
        let mut headers = http::HeaderMap::new();
        for (name, value) in conditions {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            headers.insert(name, value.parse().unwrap());
        }
        let conditions = Conditions::of(&headers);
        self.read(op, key, range, &conditions, &mut Collect::default())
            .await
    }

    async fn read(
        &self,
        op: S3Op,
        key: &str,
        range: Option<&str>,
        conditions: &Conditions,
        sink: &mut Collect,
    ) -> Result<Read, S3Error> {
        Self::read_via(&self.filter, op, key, range, conditions, sink).await
    }

    /// A whole GET of `key` through another route's filter (another bucket, same cache).
    pub async fn get_via(&self, filter: &BlockFilter, key: &str) -> Result<Read, S3Error> {
        let none = Conditions::default();
        let mut sink = Collect::default();
        Self::read_via(filter, S3Op::GetObject, key, None, &none, &mut sink).await
    }

    async fn read_via(
        filter: &BlockFilter,
        op: S3Op,
        key: &str,
        range: Option<&str>,
        conditions: &Conditions,
        sink: &mut Collect,
    ) -> Result<Read, S3Error> {
        let ctx = ctx(op, key);
        let head = op == S3Op::HeadObject;
        let ask = Ask {
            range,
            head,
            conditions,
            version: None,
        };
        let Some(mut o) = filter.open(&ctx, &ask).await? else {
            return Ok(Read::Pass);
        };
        if head || o.status == 304 {
            return Ok(Read::Served {
                status: o.status,
                bytes: Bytes::new(),
                label: o.label.as_str(),
                etag: o.map.etag.as_str().to_owned(),
                origin: (o.origin_bytes, 0),
            });
        }
        let k = ObjectKey::parse(key).unwrap();
        filter
            .stream(
                &mut o.reader,
                &k,
                (o.first, o.last),
                std::mem::take(&mut o.head),
                sink,
            )
            .await?;
        Ok(Read::Served {
            status: o.status,
            bytes: std::mem::take(&mut sink.bytes).freeze(),
            label: o.label.as_str(),
            etag: o.map.etag.as_str().to_owned(),
            origin: (o.origin_bytes, o.reader.trail.origin_bytes()),
        })
    }

    /// A HEAD of `key` (resolves the mapping without fetching bytes).
    pub async fn head(&self, key: &str) -> Option<String> {
        let ctx = ctx(S3Op::HeadObject, key);
        let none = Conditions::default();
        let ask = Ask {
            range: None,
            head: true,
            conditions: &none,
            version: None,
        };
        let o = self.filter.open(&ctx, &ask).await.ok()??;
        Some(o.map.etag.as_str().to_owned())
    }
}

/// What a GET got.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// The cache served it.
    Served {
        status: u16,
        bytes: Bytes,
        label: &'static str,
        etag: String,
        /// Origin bytes: the header's `x-floe-origin-bytes`, and the exact count the
        /// request's log line takes once the body is done.
        origin: (u64, u64),
    },
    /// The cache stepped aside (the origin answers the client).
    Pass,
}

impl Read {
    /// The bytes served (panics on a pass).
    pub fn bytes(&self) -> &Bytes {
        match self {
            Read::Served { bytes, .. } => bytes,
            Read::Pass => panic!("the cache passed the read to the origin"),
        }
    }

    /// The status answered (panics on a pass).
    pub fn status(&self) -> u16 {
        match self {
            Read::Served { status, .. } => *status,
            Read::Pass => panic!("the cache passed the read to the origin"),
        }
    }

    /// Origin bytes as the header tells them and as counted once the body was done.
    pub fn origin(&self) -> (u64, u64) {
        match self {
            Read::Served { origin, .. } => *origin,
            Read::Pass => (0, 0),
        }
    }

    /// The cache label.
    pub fn label(&self) -> &'static str {
        match self {
            Read::Served { label, .. } => label,
            Read::Pass => "pass",
        }
    }
}

/// A request context for `key` on the bed's bucket.
pub fn ctx(op: S3Op, key: &str) -> FilterCtx {
    let mut ctx = FilterCtx::new(op);
    ctx.bucket = Some(BucketName::parse(BUCKET).unwrap());
    ctx.key = Some(ObjectKey::parse(key).unwrap());
    ctx
}

/// A client that takes `delay` to accept each piece.
#[derive(Default)]
pub struct Collect {
    pub bytes: BytesMut,
    pub delay: Duration,
    pub pieces: usize,
}

#[async_trait]
impl Sink for Collect {
    async fn put(&mut self, bytes: Bytes) -> Result<(), ServeError> {
        assert!(!bytes.is_empty(), "a sink is never handed an empty piece");
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.pieces += 1;
        self.bytes.extend_from_slice(&bytes);
        Ok(())
    }
}

/// `n` bytes whose value at offset `i` depends on `seed` and `i` (a wrong offset shows).
pub fn pattern(seed: u8, n: usize) -> Bytes {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect::<Vec<u8>>()
        .into()
}
#[cfg(test)]
mod buffers;
#[cfg(test)]
mod conditional;
#[cfg(test)]
mod disk;
mod fills;
#[cfg(test)]
mod kept;
#[cfg(test)]
mod labels;
#[cfg(test)]
mod races;
#[cfg(test)]
mod seams;
#[cfg(test)]
mod shares;
#[cfg(test)]
mod tombs;
