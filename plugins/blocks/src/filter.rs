//! The `blocks` request filter: serves GetObject/HeadObject of a route from the block cache and
//! drops mappings on writes.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::conditions::Conditions;
use floe_core::fleet::Fleet;
use floe_core::{BucketName, ObjectKey, OriginError, OriginReader, S3Error, S3ErrorCode, S3Op};
use floe_filter::{FilterCtx, RequestFilter};
use lru::LruCache;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::access::Access;
use crate::answer::response_header;
use crate::cache::BlockCache;
use crate::classify::Class;
use crate::delete::{DeleteBody, DeleteKeys};
use crate::forget::{tell_fleet, Forget};
use crate::inflight::SingleFlight;
use crate::mapping::{Mapping, MappingTable};
use crate::reader::{BlockReader, Target};
use crate::serve::{Ask, ClientSink, InFlight, Opened};

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
    /// The files of this route's pinned tables (see [`crate::kept`]).
    pub(crate) kept: Arc<crate::kept::KeptSet>,
    /// The fleet whose owners this route's misses ask first (`None`: one node).
    pub(crate) fleet: Option<Arc<dyn Fleet>>,
    /// How this node hears what it missed while away (in a fleet).
    pub(crate) catch_up: Option<crate::missed::CatchUp>,
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
            kept: Arc::default(),
            fleet: None,
            catch_up: None,
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

    /// Drops the mapping of `key` (memory and persisted). A persisted mapping the disk tier
    /// was still writing could land after the removal: it is removed again once the tier's
    /// pending writes settled (and until then, and after, a dropped key's persisted mapping
    /// is not trusted: [`MappingTable::dropped_since_boot`]).
    pub fn invalidate(&self, key: &str) {
        self.map.drop_key(key);
        let object_key: Arc<str> = Arc::from(key);
        self.cache.forget_mapping(&self.bucket_key, &object_key);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (cache, bucket) = (self.cache.clone(), self.bucket_key.clone());
            rt.spawn(async move {
                cache.settle().await;
                cache.forget_mapping(&bucket, &object_key);
            });
        }
    }

    /// Drops every mapping under `prefix`; returns how many were in memory.
    pub fn invalidate_prefix(&self, prefix: &str) -> usize {
        self.map.drop_prefix(prefix)
    }

    async fn serve(&self, session: &mut Session, ctx: &mut FilterCtx) -> Result<bool, S3Error> {
        let req = session.req_header();
        let query = req.uri.query().unwrap_or("");
        let version = floe_core::version_read(query, &req.headers);
        // A key origins name differently (`a//b`, `/a`, `./`) is never cached: a write of the
        // name a folding origin gives it could not find the mapping to drop.
        let canonical = ctx.key.as_ref().is_some_and(ObjectKey::is_canonical);
        if !canonical || (version.is_none() && !floe_core::plain_read(query, &req.headers)) {
            ctx.cache = Some(floe_filter::CacheOutcome::Pass);
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
            ctx.cache = Some(floe_filter::CacheOutcome::Pass);
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
                ctx.cache = Some(floe_filter::CacheOutcome::Pass);
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
            origin_bytes,
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
                    ctx.cache = Some(floe_filter::CacheOutcome::Pass);
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
        let _miss = (origin_bytes > 0).then(|| InFlight::enter(&self.cache.foreground_misses));
        ctx.cache = Some(label);
        let resp = response_header(
            &map,
            status,
            sums,
            (first, last, body_len),
            (label, origin_bytes, node.as_deref()),
            &overrides,
            ctx,
        )?;
        session
            .write_response_header(Box::new(resp), head || body_len == 0)
            .await
            .map_err(S3Error::internal)?;
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
            .map_err(S3Error::internal)?;
        // Every byte this response's fills got from the origin, those after the header too.
        ctx.origin_bytes += reader.trail.origin_bytes();
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
    /// persisted) and blocks are purged. (A body whose keys cannot be read never reaches the
    /// origin: see `request_body_filter`.)
    fn after_delete_objects(&self, ctx: &FilterCtx) {
        let Some(keys) = ctx.ext.get::<DeleteKeys>().map(|k| k.0.clone()) else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            for k in &keys {
                me.purge_key(k).await;
            }
        });
    }

    /// What a write request changes at the origin: its key and the name a folding origin
    /// gives it (a write, a delete, a change of the object's tags, retention, ...), a
    /// DeleteObjects' keys once its body was read, or every key of the bucket (a lifecycle
    /// rule: each HEAD's `x-amz-expiration`); `None`: not a write.
    fn written(&self, ctx: &FilterCtx) -> Option<Forget> {
        let keys = match ctx.op {
            S3Op::PutObject
            | S3Op::PostObject
            | S3Op::CopyObject
            | S3Op::DeleteObject
            | S3Op::CompleteMultipartUpload => self.key_names(ctx)?,
            S3Op::Config(c) if c.changes_object_answers() => self.key_names(ctx)?,
            S3Op::Config(c) if c.changes_bucket_answers() => {
                return Some(Forget {
                    every: true,
                    ..Forget::keys(&self.bucket_key, Vec::new())
                });
            }
            S3Op::DeleteObjects => ctx.ext.get::<DeleteKeys>()?.0.clone(),
            _ => return None,
        };
        Some(Forget::keys(&self.bucket_key, keys))
    }

    /// The request's key and the name a folding origin gives it.
    fn key_names(&self, ctx: &FilterCtx) -> Option<Vec<String>> {
        let key = ctx.key.as_ref()?;
        let mut keys = vec![key.as_str().to_owned()];
        keys.extend(key.folded().map(|k| k.as_str().to_owned()));
        Some(keys)
    }

    /// Drops what `forget` names here (memory; persisted mappings too, or distrusted).
    fn apply(&self, forget: &Forget) {
        if forget.every {
            self.invalidate_prefix("");
        }
        forget.keys.iter().for_each(|k| self.invalidate(k));
    }

    /// Drops `keys` here and on every other member (see [`BlockFilter::tell_everywhere`]).
    pub(crate) async fn forget_everywhere(&self, keys: Vec<String>) {
        self.tell_everywhere(Forget::keys(&self.bucket_key, keys))
            .await;
    }

    /// Applies `forget` here and on every other member; in a fleet, returns once every member
    /// confirmed (or [`crate::forget::TELL_WAIT`] passed), twice over (see
    /// [`crate::forget::tell_fleet`] for why one round is not enough).
    async fn tell_everywhere(&self, forget: Forget) {
        let Some(fleet) = &self.fleet else {
            self.apply(&forget);
            return;
        };
        self.cache.forgets.record(&forget);
        let mut missed: Vec<Arc<str>> = Vec::new();
        for _round in 0..2 {
            self.apply(&forget);
            let late = tell_fleet(fleet, &self.cache.recipients, &forget, &missed).await;
            if !late.is_empty() {
                tracing::warn!(
                    members = ?late,
                    "members did not confirm a write's forget in time: retrying in the background"
                );
            }
            missed.extend(late);
        }
    }
}

/// Marks a write whose members were told before its answer went out.
#[derive(Clone, Copy)]
struct Told;

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
            S3Op::GetObject | S3Op::HeadObject => {
                if let Some(c) = &self.catch_up {
                    c.before_read().await;
                }
                self.serve(session, ctx).await
            }
            S3Op::PutObject
            | S3Op::PostObject
            | S3Op::CopyObject
            | S3Op::DeleteObject
            | S3Op::CompleteMultipartUpload
            | S3Op::Config(_)
                if self.written(ctx).is_some() =>
            {
                if let Some(forget) = self.written(ctx) {
                    self.apply(&forget);
                }
                if let Some(k) = &ctx.key {
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
                // The keys are in the body: held back until it is read whole.
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
        // Held back whole: the origin sees the body only once Floe has read the keys it names,
        // so it never deletes keys whose mappings Floe would keep.
        if let Some(piece) = body.take() {
            if !collected.push(&piece) {
                return Err(S3Error::new(
                    S3ErrorCode::MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema",
                ));
            }
        }
        *body = Some(Bytes::new());
        if end_of_stream {
            let Some(keys) = collected.keys() else {
                return Err(S3Error::new(
                    S3ErrorCode::MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema",
                ));
            };
            *body = Some(collected.take());
            keys.iter().for_each(|k| self.invalidate(k));
            ctx.ext.remove::<DeleteBody>();
            ctx.ext.insert(DeleteKeys(keys));
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        let Some(forget) = self.written(ctx) else {
            return Ok(());
        };
        // A 4xx changed nothing; a 5xx may have committed before failing.
        if !(400..500).contains(&resp.status.as_u16()) {
            self.tell_everywhere(forget).await;
        }
        ctx.ext.insert(Told);
        Ok(())
    }

    fn logging(&self, ctx: &FilterCtx, status: u16) {
        if let Some(forget) = self.written(ctx) {
            // Told: the keys were dropped everywhere before the answer, and resolves that
            // crossed those drops kept nothing; dropping again now, after the client has its
            // answer, would only throw away what reads resolved since (the control plane's warm
            // of a commit's files). A write another stage answered (write-back) never reached
            // this stage's hooks: dropped now. A 4xx from the origin changed nothing. Otherwise
            // no answer came from the origin (cut off, timed out) and it may have committed.
            let told = ctx.ext.get::<Told>().is_some();
            let refused = ctx.answered_by.is_none() && (400..500).contains(&status);
            if !told && !refused {
                let me = self.clone();
                tokio::spawn(async move { me.tell_everywhere(forget).await });
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
