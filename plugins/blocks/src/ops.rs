//! The block filter's operations for the admin API and the control plane: purge, warm, read
//! through the cache, write-through after uploads, and catalog-pinned classes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_core::{BucketName, ObjectKey, OriginError, S3Op};
use floe_filter::FilterCtx;

use crate::classify::{Class, Store};
use crate::filter::BlockFilter;
use crate::mapping::Mapping;
use crate::range::{block_span, blocks_of};
use crate::resolve::Probe;
use crate::tap::{ServeError, Sink};

/// Why an admin or control-plane operation on the cache failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The origin has no such object.
    #[error("no such object")]
    NotFound,
    /// The origin failed.
    #[error("origin: {0}")]
    Origin(#[from] OriginError),
    /// The object is larger than the operation allows.
    #[error("{0} bytes is over the write-through cap")]
    OverCap(u64),
    /// Reading through the cache failed part-way.
    #[error("reading through the cache: {0}")]
    Serve(#[from] ServeError),
}

impl From<OpError> for floe_core::S3Error {
    fn from(e: OpError) -> Self {
        use floe_core::{S3Error, S3ErrorCode};
        let code = match &e {
            OpError::NotFound => S3ErrorCode::NoSuchKey,
            OpError::OverCap(_) => S3ErrorCode::EntityTooLarge,
            OpError::Origin(_) | OpError::Serve(_) => S3ErrorCode::ServiceUnavailable,
        };
        S3Error::new(code, e.to_string()).caused_by(e)
    }
}

/// Which bytes of an object a warm or read covers (the admin API's span).
pub use floe_core::wire::Span as ReadSpan;

/// How `BlockFilter::blocks` walks a span.
#[derive(Debug, Clone, Copy)]
struct Walk {
    /// Keep the span's bytes for the caller (a read), not only warm them.
    keep_bytes: bool,
    /// Keep copies of blocks peers send (false: only their owners keep them).
    replica: bool,
}

/// Collects a read's bytes (or only counts them through, when not kept).
struct Collect(BytesMut, bool);

#[async_trait::async_trait]
impl Sink for Collect {
    async fn put(&mut self, bytes: Bytes) -> Result<(), ServeError> {
        if self.1 {
            self.0.extend_from_slice(&bytes);
        }
        Ok(())
    }
}

/// Bytes read through the cache, with the version they belong to.
#[derive(Debug, Clone)]
pub struct ReadOut {
    /// The bytes.
    pub bytes: Bytes,
    /// Offset of the first byte.
    pub first: u64,
    /// Object size.
    pub size: u64,
    /// The version's ETag.
    pub etag: String,
}

impl BlockFilter {
    /// The class of `key`: the control plane's pinned class if any, else the path rules.
    pub(crate) fn class_of(&self, key: &str) -> Class {
        if self.kept.contains(key) {
            let in_part = self.cache.kept_parts.get(&self.bucket_key, key).is_some();
            return crate::kept::KeptSet::class(key, in_part);
        }
        if let Ok(mut p) = self.pinned.lock() {
            if let Some(c) = p.get(key) {
                return *c;
            }
        }
        self.cache.classify(key)
    }

    /// Pins keys the catalog names as immutable table files: `store` Metadata for metadata.json,
    /// manifest lists, manifests and stats; Data for data and delete files. Drops any mapping
    /// resolved under another class. Returns how many keys are pinned now.
    pub fn pin(&self, keys: &[String], store: Store) -> usize {
        let Ok(mut p) = self.pinned.lock() else {
            return 0;
        };
        for k in keys {
            let class = Class {
                store,
                immutable: true,
                parquet: k.ends_with(".parquet"),
            };
            if p.put(Box::from(k.as_str()), class) != Some(class) {
                // A new class, not a new version: no write fence (a warm under way keeps its
                // mapping, as it did before writes were fenced).
                self.map.unmap(k);
            }
            while p.len() > self.max_pins {
                p.pop_lru();
            }
        }
        p.len()
    }

    /// Purges a key: its mapping and every block of its known version. Returns blocks removed.
    /// Blocks still being written to disk when the purge starts could land after the first
    /// removal, so it waits for the disk tier's pending writes and removes again.
    pub async fn purge_key(&self, key: &str) -> u64 {
        let known = match self.map.get(key) {
            Some(m) => Some(m),
            // Not in memory (e.g. after a restart): the persisted mapping names the version.
            None => self
                .cache
                .load_mapping(&self.bucket_key, &Arc::from(key), self.class_of(key))
                .await
                .map(Arc::new),
        };
        let removed = match &known {
            Some(m) => self
                .cache
                .remove_blocks(&self.bucket_key, &Arc::from(key), m),
            None => 0,
        };
        if let Ok(mut p) = self.pinned.lock() {
            p.pop(key);
        }
        self.invalidate(key);
        if let Some(m) = &known {
            self.cache.settle().await;
            self.cache
                .remove_blocks(&self.bucket_key, &Arc::from(key), m);
        }
        removed
    }

    /// Purges every known key under `prefix`. Returns (keys, blocks) removed.
    pub async fn purge_prefix(&self, prefix: &str) -> (u64, u64) {
        let keys = self.map.keys_with_prefix(prefix);
        let mut blocks = 0;
        for k in &keys {
            blocks += self.purge_key(k).await;
        }
        (keys.len() as u64, blocks)
    }

    /// Most bytes one written object is read back into the cache for: a quarter of the data
    /// store's DRAM, so one large upload cannot displace the working set.
    fn write_through_cap(&self) -> u64 {
        (self.cache.settings.data.dram_bytes / 4) as u64
    }

    pub(crate) async fn write_through(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<u64, OpError> {
        let (map, _) = self.mapping(bucket, key).await?;
        if map.size > self.write_through_cap() {
            return Err(OpError::OverCap(map.size));
        }
        self.cache
            .touch_blocks(&self.bucket_key, &key.shared(), &map);
        self.warm(bucket, key, ReadSpan::Whole, None, true).await
    }

    async fn mapping(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> Result<(Arc<Mapping>, bool), OpError> {
        let mut ctx = FilterCtx::new(S3Op::GetObject);
        ctx.bucket = Some(bucket.clone());
        ctx.key = Some(key.clone());
        self.resolve(&ctx, Probe::Head)
            .await?
            .map(|r| (r.map, r.known))
            .ok_or(OpError::NotFound)
    }

    /// Warms `span` of `key` (whole blocks), forcing the store when `force` is set; `replica`
    /// false: in a fleet only the blocks' owners keep them (the control plane's data prefetch),
    /// this node keeps no copy of what they send. Returns the bytes warmed.
    pub async fn warm(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        span: ReadSpan,
        force: Option<Store>,
        replica: bool,
    ) -> Result<u64, OpError> {
        let walk = Walk {
            keep_bytes: false,
            replica,
        };
        self.blocks(bucket, key, span, force, walk)
            .await
            .map(|(n, _)| n)
    }

    /// Reads `span` of `key` through the cache (warming what is missing) and returns the bytes.
    pub async fn read(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        span: ReadSpan,
        force: Option<Store>,
    ) -> Result<ReadOut, OpError> {
        let walk = Walk {
            keep_bytes: true,
            replica: true,
        };
        self.blocks(bucket, key, span, force, walk)
            .await
            .map(|(_, out)| out)
    }

    /// Walks the blocks of `span` (whole blocks are warmed), as `walk` says. Returns the bytes
    /// of the blocks walked and the span's bytes and place.
    async fn blocks(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        span: ReadSpan,
        force: Option<Store>,
        walk: Walk,
    ) -> Result<(u64, ReadOut), OpError> {
        // Before the resolve: a store forced on a version a write replaced meanwhile is not kept.
        let ticket = self.map.ticket(key.as_str());
        let (mut map, _) = self.mapping(bucket, key).await?;
        if let Some(store) = force {
            if map.class.store != store {
                let mut m = Mapping::clone(&map);
                m.class.store = store;
                m.class.parquet = m.class.parquet && store == Store::Data;
                map = Arc::new(m);
                self.map
                    .put_unless_dropped(key.as_str(), map.clone(), ticket);
            }
        }
        let mut out = ReadOut {
            bytes: Bytes::new(),
            first: 0,
            size: map.size,
            etag: map.etag.as_str().to_owned(),
        };
        if map.size == 0 {
            return Ok((0, out));
        }
        let end = map.size - 1;
        let (first, last) = match span {
            ReadSpan::Whole => (0, end),
            ReadSpan::Range(a, b) => (a.min(end), b.min(end)),
            ReadSpan::Suffix(n) => (map.size.saturating_sub(n), end),
        };
        out.first = first;
        let bs = self.cache.settings.block_bytes;
        let (b0, b1) = blocks_of(first, last, bs);
        let mut reader = self.reader((bucket, key), &map, (first, last), true);
        reader.replica = walk.replica;
        let mut warmed = 0;
        let mut sink = Collect(BytesMut::new(), walk.keep_bytes);
        for i in b0..=b1 {
            reader.serve(i, &mut sink).await?;
            warmed += block_span(i, bs, map.size).1;
        }
        out.bytes = sink.0.freeze();
        Ok((warmed, out))
    }
}
