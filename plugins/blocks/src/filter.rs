//! The `blocks` request filter: serves GetObject/HeadObject of a route from the block cache and
//! drops mappings on writes.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::conditions::Conditions;
use floe_core::fleet::Fleet;
use floe_core::{
    BucketName, FilterCtx, ObjectKey, OriginError, OriginReader, RequestFilter, S3Error, S3Op,
};
use lru::LruCache;
use pingora::proxy::Session;

use crate::access::Access;
use crate::answer::response_header;
use crate::cache::BlockCache;
use crate::classify::Class;
use crate::delete::{DeleteBody, DeleteKeys};
use crate::inflight::SingleFlight;
use crate::mapping::{Mapping, MappingTable};
use crate::reader::{BlockReader, Target};
use crate::serve::{internal, Ask, ClientSink, InFlight, Opened};

/// Most keys the control plane can pin per route. Pins cost ~150 bytes each; a table with more
/// live files than this keeps the least recently used ones on the path rules (which classify
/// standard Iceberg layouts the same way).
pub const MAX_PINS: usize = 1 << 18;

/// The block-cache stage of one route.
#[derive(Clone)]
pub struct BlockFilter {
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) origin: Arc<dyn OriginReader>,
    pub(crate) bucket_key: Arc<str>,
    pub(crate) map: Arc<MappingTable>,
    /// Mappings of `versionId` reads (see [`crate::version`]).
    pub(crate) versions: Arc<MappingTable>,
    pub(crate) resolving: Arc<SingleFlight<String, Resolved>>,
    /// Classes the control plane sent (from the catalog); they outrank the path rules. At most
    /// [`MAX_PINS`], least recently used first out (an unpinned key falls back to the rules).
    pub(crate) pinned: Arc<Mutex<LruCache<Box<str>, Class>>>,
    pub(crate) max_pins: usize,
    /// The fleet whose owners this route's misses ask first (`None`: one node).
    pub(crate) fleet: Option<Arc<dyn Fleet>>,
}

/// The outcome of resolving a key, shared by concurrent requests for it.
pub(crate) type Resolved = Result<Option<(Arc<Mapping>, bool)>, OriginError>;

impl BlockFilter {
    /// A stage for `bucket` reading misses from `origin`.
    pub fn new(cache: Arc<BlockCache>, origin: Arc<dyn OriginReader>, bucket: &str) -> Self {
        Self {
            cache,
            origin,
            bucket_key: Arc::from(bucket),
            map: Arc::new(MappingTable::default()),
            versions: Arc::new(MappingTable::with_capacity(
                crate::version::MAX_VERSION_MAPPINGS,
            )),
            resolving: Arc::new(SingleFlight::default()),
            pinned: Arc::new(Mutex::new(LruCache::unbounded())),
            max_pins: MAX_PINS,
            fleet: None,
        }
    }

    /// This stage in `fleet`: its misses ask their owners first.
    pub fn in_fleet(mut self, fleet: Arc<dyn Fleet>) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// What a reader of version `map` of `key` serves.
    pub(crate) fn target(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        map: &Arc<Mapping>,
    ) -> Target {
        Target {
            bucket: bucket.clone(),
            key: key.clone(),
            bucket_key: self.bucket_key.clone(),
            object_key: key.shared(),
            map: map.clone(),
        }
    }

    /// A reader of bytes `first..=last` of version `map` of `key`; `whole` fills whole blocks
    /// (warming).
    pub(crate) fn reader(
        &self,
        (bucket, key): (&BucketName, &ObjectKey),
        map: &Arc<Mapping>,
        span: (u64, u64),
        whole: bool,
    ) -> BlockReader {
        let target = self.target(bucket, key, map);
        // Owners fill current versions only: a named version is filled here.
        let fleet = self.fleet.clone().filter(|_| map.version_id.is_none());
        BlockReader::new(self.cache.clone(), self.origin.clone(), target, span, whole)
            .with_fleet(fleet)
    }

    /// Drops the mapping of `key` (memory and persisted).
    pub fn invalidate(&self, key: &str) {
        self.map.drop_key(key);
        self.cache.forget_mapping(&self.bucket_key, &Arc::from(key));
    }

    /// Drops every mapping under `prefix`; returns how many were in memory.
    pub fn invalidate_prefix(&self, prefix: &str) -> usize {
        self.map.drop_prefix(prefix)
    }

    async fn serve(&self, session: &mut Session, ctx: &mut FilterCtx) -> Result<bool, S3Error> {
        let req = session.req_header();
        let query = req.uri.query().unwrap_or("");
        let version = floe_core::version_read(query, &req.headers);
        if version.is_none() && !floe_core::plain_read(query, &req.headers) {
            ctx.cache = Some("pass");
            return Ok(false);
        }
        let range = req.headers.get("range").and_then(|v| v.to_str().ok());
        // S3 returns full-object checksums only on whole-object reads; current SDKs ask for them
        // on every GET. They are kept with the version and sent on whole answers only.
        let sums = range.is_none() && req.headers.contains_key("x-amz-checksum-mode");
        let head = ctx.op == S3Op::HeadObject;
        let conditions = Conditions::of(&req.headers);
        let overrides = floe_core::response_overrides(req.uri.query().unwrap_or(""));
        if !overrides.is_empty() && ctx.access_key.is_none() {
            // S3 refuses response header overrides on anonymous reads: the origin answers.
            ctx.cache = Some("pass");
            return Ok(false);
        }
        let ask = Ask {
            range,
            head,
            conditions: &conditions,
            version: version.as_deref(),
        };
        let opened = match self.open(ctx, &ask).await? {
            Some(o) => o,
            None => {
                ctx.cache = Some("pass");
                return Ok(false);
            }
        };
        let Opened {
            mut map,
            status,
            first,
            last,
            mut reader,
            label,
            missing,
            node,
            head: held,
        } = opened;
        let Some(key) = ctx.key.clone() else {
            return Ok(false);
        };
        let not_modified = status == 304;
        if sums && !not_modified && map.checksums.is_none() {
            // Resolved by a ranged answer: one HEAD learns the checksums of this version.
            match self.learn_checksums(&key, &map).await {
                Some(m) => map = m,
                None => {
                    ctx.cache = Some("pass");
                    return Ok(false);
                }
            }
        }
        let body_len = if map.size == 0 || not_modified {
            0
        } else {
            last - first + 1
        };
        // Counted while this response waits on the origin (released when serve returns).
        let _miss = (missing > 0).then(|| InFlight::enter(&self.cache.foreground_misses));
        ctx.cache = Some(label);
        let resp = response_header(
            &map,
            status,
            sums,
            (first, last, body_len),
            (label, missing, node.as_deref()),
            &overrides,
            ctx,
        )?;
        session
            .write_response_header(Box::new(resp), head || body_len == 0)
            .await
            .map_err(internal)?;
        if head || body_len == 0 {
            return Ok(true);
        }
        self.stream(
            &mut reader,
            &key,
            (first, last),
            held,
            &mut ClientSink(session),
        )
        .await?;
        session
            .write_response_body(None, true)
            .await
            .map_err(internal)?;
        ctx.origin_bytes += missing;
        self.cache.access.record(Access {
            bucket: self.bucket_key.clone(),
            key: key.shared(),
            etag: map.etag_key.clone(),
            offset: first,
            len: body_len,
        });
        Ok(true)
    }
}

impl BlockFilter {
    /// Once the origin answered a DeleteObjects: every named key's mapping (memory and
    /// persisted) and blocks are purged. A body whose keys could not be read drops every
    /// in-memory mapping of the route; persisted ones are then revalidated only by a purge.
    fn after_delete_objects(&self, ctx: &FilterCtx) {
        let keys = ctx.ext.get::<DeleteKeys>().and_then(|k| k.0.clone());
        let Some(keys) = keys else {
            let n = self.invalidate_prefix("");
            tracing::warn!(
                dropped = n,
                "DeleteObjects body unreadable: every in-memory mapping of the route dropped"
            );
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            for k in &keys {
                me.purge_key(k).await;
            }
        });
    }
}

#[async_trait]
impl RequestFilter for BlockFilter {
    fn name(&self) -> &'static str {
        "blocks"
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
    ) -> Result<bool, S3Error> {
        match ctx.op {
            S3Op::GetObject | S3Op::HeadObject => self.serve(session, ctx).await,
            S3Op::PutObject
            | S3Op::CopyObject
            | S3Op::DeleteObject
            | S3Op::CompleteMultipartUpload => {
                if let Some(k) = &ctx.key {
                    self.invalidate(k.as_str());
                    let query = session.req_header().uri.query().unwrap_or("");
                    if let Some(v) = floe_core::version_read(query, &http::HeaderMap::new()) {
                        self.forget_version(k.as_str(), &v);
                    }
                }
                Ok(false)
            }
            S3Op::DeleteObjects => {
                // Its body may name versions: every version mapping of the route goes.
                self.versions.drop_prefix("");
                // The keys are in the body: collected as it streams to the origin.
                ctx.ext.insert(DeleteBody::default());
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    async fn request_body_filter(
        &self,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        let Some(collected) = ctx.ext.get_mut::<DeleteBody>() else {
            return Ok(());
        };
        if let Some(piece) = body {
            collected.push(piece);
        }
        if end_of_stream {
            // Parsed once; dropped before the origin answers, and again (with their blocks)
            // once it has (see `logging`).
            let keys = collected.keys();
            match &keys {
                Some(keys) => keys.iter().for_each(|k| self.invalidate(k)),
                None => {
                    self.invalidate_prefix("");
                }
            }
            ctx.ext.remove::<DeleteBody>();
            ctx.ext.insert(DeleteKeys(keys));
        }
        Ok(())
    }

    fn logging(&self, ctx: &FilterCtx, status: u16) {
        // A write may have raced a read that re-resolved the old version: drop again once the
        // write is answered.
        if matches!(
            ctx.op,
            S3Op::PutObject | S3Op::CopyObject | S3Op::DeleteObject | S3Op::CompleteMultipartUpload
        ) {
            if let Some(k) = &ctx.key {
                self.invalidate(k.as_str());
            }
        }
        if ctx.op == S3Op::DeleteObjects {
            self.after_delete_objects(ctx);
        }
        // A completed write of a cacheable object is read back into the cache under the ETag
        // the origin now reports (a re-read, not a tee of the upload: see write_through_cap).
        // Not a write a stage answered itself (write-back's staged PUT): the origin does not
        // have it yet, and the re-read would cache the version it replaced.
        if status == 200
            && ctx.answered_by.is_none()
            && matches!(
                ctx.op,
                S3Op::PutObject | S3Op::CopyObject | S3Op::CompleteMultipartUpload
            )
        {
            if let (Some(b), Some(k)) = (ctx.bucket.clone(), ctx.key.clone()) {
                let me = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = me.write_through(&b, &k).await {
                        tracing::debug!(key = %k, error = %e, "write-through warm skipped");
                    }
                });
            }
        }
    }
}
