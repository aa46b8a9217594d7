//! The `writeback` stage: stages a route's PutObjects across the fleet, answers GET and HEAD of
//! keys with an acknowledged, unpropagated write, and orders a DELETE or a direct PUT after
//! such a write (it is dropped from the index, so propagation never resurrects it).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::conditions::{Conditions, Verdict};
use floe_core::copy_source::CopySource;
use floe_core::range::{resolve, RangeAsk};
use floe_core::spans::{Phase, Started};
use floe_core::{ByteStream, S3Error, S3ErrorCode, S3Op};
use floe_filter::{FilterCtx, RequestFilter};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::config::RouteOptions;
use crate::journal::Record;
use crate::list::{self, ListAsk};
use crate::metrics;
use crate::node::Node;
use crate::propagate::origin_of;
use crate::propagate::Origins;
use crate::session_body::{
    body_size, continue_body, expected_digests, header, kept_headers, origin_only, SessionBody,
};
use crate::settle::Settled;
use crate::stage::Object;

/// Longest a request waits for a node back from away to catch up (catch-up itself ends within
/// the repair grace, 10 s by default, whatever its peers do).
const CATCH_UP_WAIT: Duration = Duration::from_secs(15);

/// How a PUT went, for the answer's `x-floe-writeback` and the metrics.
#[derive(Debug, Clone, Copy)]
struct Mode(&'static str);

/// One route's write-back stage.
pub struct WritebackFilter {
    /// This node's write-back state.
    pub node: Arc<Node>,
    /// The route's options (none: reads of staged writes only).
    pub opts: Option<RouteOptions>,
    /// The route's bucket.
    pub bucket: String,
    /// Origins by bucket (for a synchronous write).
    pub origins: Origins,
    /// A block cache follows on the route: plain reads of staged writes are its to serve
    /// (through [`crate::origin_layer`]), so they are cached like any object.
    pub cache_after: bool,
}

impl WritebackFilter {
    async fn put(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
    ) -> Result<bool, S3Error> {
        let Some(opts) = self.opts else {
            return Ok(false);
        };
        // A staged write of the key is overtaken by this one only once this one is durable:
        // a write that fails (refused, cut off mid-body) leaves the one before acknowledged.
        let prior = self.node.staged.get(&self.bucket, key);
        let size = body_size(session);
        let copy = header(session, "x-amz-copy-source").is_some() || origin_only(session);
        let plan = match size {
            Some(size) if !copy => self.node.coordinator().plan(&opts, size),
            _ => None,
        };
        // The stage must hand over the plain bytes (aws-chunked framing stripped); one that
        // cannot leaves the PUT to the origin.
        let plan = plan.filter(|_| ctx.body_stage.as_mut().is_none_or(|s| s.plain()));
        let Some(plan) = plan else {
            ctx.ext.insert(Mode("direct"));
            // The origin takes this write itself: the staged one before it lands first (one
            // this node missed included).
            drop(prior);
            self.flush_key(key).await?;
            return Ok(false);
        };
        let expected = expected_digests(session)?;
        let preread = continue_body(session, ctx).await?;
        let headers = kept_headers(session);
        let obj = Object {
            bucket: &self.bucket,
            key,
            headers,
            expected,
            parts: Vec::new(),
        };
        let started = std::time::Instant::now();
        let outcome = {
            let mut body = SessionBody::new(session, ctx.body_stage.as_mut(), preread);
            self.node
                .coordinator()
                .stage(plan, obj, &mut body, &mut ctx.phases)
                .await?
        };
        let synced = Started::now();
        let (etag, settled) = self.node.settle(prior.as_ref(), outcome).await?;
        if settled == Settled::Sync {
            floe_core::spans::record(&mut ctx.phases, || Phase::new("writeback.sync", synced));
        }
        let mode = settled.as_str();
        metrics::put(mode, started.elapsed());
        ctx.ext.insert(Mode(mode));
        let mut resp = ResponseHeader::build(200, Some(4)).map_err(S3Error::internal)?;
        resp.insert_header("etag", etag)
            .map_err(S3Error::internal)?;
        resp.insert_header("content-length", "0")
            .map_err(S3Error::internal)?;
        resp.insert_header("x-floe-writeback", mode)
            .map_err(S3Error::internal)?;
        resp.insert_header("x-amz-request-id", ctx.request_id.to_string())
            .map_err(S3Error::internal)?;
        session
            .write_response_header(Box::new(resp), true)
            .await
            .map_err(S3Error::internal)?;
        Ok(true)
    }

    /// Puts staged write `r` at the origin now, because a later write or delete of its key is
    /// about to go to the origin itself (see [`crate::flush`]).
    pub(crate) async fn flush(&self, r: &Arc<Record>) -> Result<(), S3Error> {
        self.node.flush(r).await
    }

    /// The key's staged writes land first (see [`Node::flush_object`]); the request goes on.
    async fn flush_key(&self, key: &str) -> Result<bool, S3Error> {
        self.node.flush_object(&self.bucket, key).await?;
        Ok(false)
    }

    async fn get(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        r: Arc<Record>,
    ) -> Result<bool, S3Error> {
        let size = r.geometry.size;
        let head = ctx.op == S3Op::HeadObject;
        // The staged write is the newest acknowledged version: its conditions are final here.
        let modified = UNIX_EPOCH + Duration::from_millis(r.acked_ms);
        let last_modified = match r.headers.iter().find(|(k, _)| k == "last-modified") {
            Some((_, v)) => v.clone(),
            None => httpdate::fmt_http_date(modified),
        };
        let conditions = Conditions::of(&session.req_header().headers);
        match conditions.evaluate(&r.etag, Some(modified)) {
            Verdict::Proceed => {}
            Verdict::PreconditionFailed { .. } => {
                return Err(S3Error::precondition_failed()
                    .with_header("etag", r.etag.as_str())
                    .with_header("last-modified", last_modified));
            }
            Verdict::NotModified => {
                let resp = staged_header(304, &r, last_modified, ctx)?;
                ctx.cache = Some(floe_filter::CacheOutcome::Writeback);
                session
                    .write_response_header(Box::new(resp), true)
                    .await
                    .map_err(S3Error::internal)?;
                return Ok(true);
            }
        }
        let (status, first, last) = match resolve(header(session, "range"), size) {
            RangeAsk::Part { first, last } => (206, first, last),
            RangeAsk::Unsatisfiable => return Err(S3Error::invalid_range(size)),
            RangeAsk::Whole | RangeAsk::Multi => (200, 0, size.saturating_sub(1)),
        };
        let len = if size == 0 { 0 } else { last + 1 - first };
        let mut resp = staged_header(status, &r, last_modified, ctx)?;
        resp.insert_header("content-length", len.to_string())
            .map_err(S3Error::internal)?;
        resp.insert_header("accept-ranges", "bytes")
            .map_err(S3Error::internal)?;
        if status == 206 {
            resp.insert_header("content-range", format!("bytes {first}-{last}/{size}"))
                .map_err(S3Error::internal)?;
        }
        for (k, v) in r.headers.iter().filter(|(k, _)| k != "last-modified") {
            resp.append_header(k.clone(), v.clone())
                .map_err(S3Error::internal)?;
        }
        ctx.cache = Some(floe_filter::CacheOutcome::Writeback);
        let body_follows = !head && len > 0;
        let unreadable = |e: floe_core::OriginError| {
            S3Error::new(
                S3ErrorCode::InternalError,
                "The staged object could not be read.",
            )
            .caused_by(e)
        };
        // The first stripe is read before the header goes: an object with too few intact
        // fragments is a clean 500, not a cut body.
        let origin = origin_of(&self.origins, &self.bucket);
        let mut stream = crate::read_through::ReadThrough::new(&self.node, r, first, last, origin);
        let mut piece = match body_follows {
            true => stream.next().await.map_err(unreadable)?,
            false => None,
        };
        session
            .write_response_header(Box::new(resp), !body_follows)
            .await
            .map_err(S3Error::internal)?;
        if !body_follows {
            return Ok(true);
        }
        while let Some(b) = piece {
            session
                .write_response_body(Some(b), false)
                .await
                .map_err(S3Error::internal)?;
            piece = stream.next().await.map_err(unreadable)?;
        }
        session
            .write_response_body(None, true)
            .await
            .map_err(S3Error::internal)?;
        Ok(true)
    }
}

/// Whether the request is a plain read a cache stage serves (see [`floe_core::plain_read`]).
fn plain(session: &Session) -> bool {
    let req = session.req_header();
    floe_core::plain_read(req.uri.query().unwrap_or(""), &req.headers)
}

/// The header every answer about staged write `r` carries: its validators (ETag,
/// `last_modified`), that it is staged, and the request id.
fn staged_header(
    status: u16,
    r: &Record,
    last_modified: String,
    ctx: &FilterCtx,
) -> Result<ResponseHeader, S3Error> {
    let mut resp = ResponseHeader::build(status, Some(8)).map_err(S3Error::internal)?;
    resp.insert_header("etag", r.etag.as_str())
        .map_err(S3Error::internal)?;
    resp.insert_header("last-modified", last_modified)
        .map_err(S3Error::internal)?;
    resp.insert_header("x-floe-writeback", "dirty")
        .map_err(S3Error::internal)?;
    resp.insert_header("x-amz-request-id", ctx.request_id.to_string())
        .map_err(S3Error::internal)?;
    Ok(resp)
}

/// The current object a copy reads (none for a named version, which the origin keeps, nor
/// for a header the proxy refuses anyway).
fn copy_source(session: &Session) -> Option<CopySource> {
    let source = CopySource::parse(header(session, "x-amz-copy-source")?).ok()?;
    source.reads_current().then_some(source)
}

/// Whether the read names a version other than `null` (the staged write has no version id
/// until the origin has it; `null` on an unversioned bucket is the current object, staged).
fn names_version(session: &Session) -> bool {
    let query = session.req_header().uri.query().unwrap_or("");
    query
        .split('&')
        .filter_map(|p| p.strip_prefix("versionId="))
        .any(|v| !v.is_empty() && v != "null")
}

/// A list page being collected for merging.
#[derive(Clone)]
struct ListMerge {
    ask: ListAsk,
    dirty: Vec<Arc<Record>>,
    /// For ListMultipartUploads: the uploads Floe holds open (`dirty` is then empty).
    uploads: Vec<crate::list_uploads::OpenUpload>,
    page: Vec<u8>,
}

/// What a list request asked for (prefix, delimiter, marker, encoding).
fn list_ask(session: &Session, marker: &[&str]) -> ListAsk {
    let param = |name: &str| crate::upload::query(session, name).map(list::decode_query);
    ListAsk {
        prefix: param("prefix").unwrap_or_default(),
        delimiter: param("delimiter"),
        after: marker
            .iter()
            .find_map(|m| param(m))
            .filter(|a| !a.is_empty()),
        url: param("encoding-type").is_some_and(|e| e == "url"),
    }
}

impl WritebackFilter {
    /// Prepares the merge of this bucket's staged writes into a list answer.
    fn list(&self, session: &Session, ctx: &mut FilterCtx) {
        let dirty: Vec<Arc<Record>> = self
            .node
            .staged
            .all()
            .into_iter()
            .filter(|r| r.bucket == self.bucket)
            .collect();
        if dirty.is_empty() {
            return;
        }
        ctx.ext.insert(ListMerge {
            ask: list_ask(session, &["start-after", "marker"]),
            dirty,
            uploads: Vec::new(),
            page: Vec::new(),
        });
    }

    /// Prepares the merge of the uploads open on the fleet into a ListMultipartUploads answer.
    async fn list_uploads(&self, session: &Session, ctx: &mut FilterCtx) {
        if self.opts.is_none() {
            return;
        }
        let uploads = self.node.open_uploads(&self.bucket).await;
        if uploads.is_empty() {
            return;
        }
        ctx.ext.insert(ListMerge {
            ask: list_ask(session, &["key-marker"]),
            dirty: Vec::new(),
            uploads,
            page: Vec::new(),
        });
    }
}

#[async_trait]
impl RequestFilter for WritebackFilter {
    fn name(&self) -> &'static str {
        "writeback"
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
    ) -> Result<bool, S3Error> {
        let key = ctx
            .key
            .as_ref()
            .map_or(String::new(), |k| k.as_str().to_owned());
        // Requests about the route rather than one key (lists, multi-object deletes).
        let route_wide = matches!(
            ctx.op,
            S3Op::ListObjects
                | S3Op::ListObjectsV2
                | S3Op::ListMultipartUploads
                | S3Op::DeleteObjects
        );
        if key.is_empty() && !route_wide {
            return Ok(false);
        }
        // A node back from away answers nothing of the route before it knows every write
        // acknowledged meanwhile: not a read (it would serve the older version), not a delete
        // or an origin-bound write (the staged write it does not know yet would land after).
        if !self.node.wait_caught_up(CATCH_UP_WAIT).await {
            return Err(S3Error::new(
                S3ErrorCode::SlowDown,
                "This node is catching up on acknowledged writes; retry.",
            ));
        }
        match ctx.op {
            S3Op::PutObject => self.put(session, ctx, &key).await,
            S3Op::GetObject | S3Op::HeadObject => match self.node.staged.get(&self.bucket, &key) {
                // A named version is one the origin keeps: never the staged write.
                Some(_) if names_version(session) => Ok(false),
                Some(_) if self.cache_after && plain(session) => Ok(false),
                Some(r) => self.get(session, ctx, r).await,
                None => Ok(false),
            },
            S3Op::ListObjects | S3Op::ListObjectsV2 => {
                self.list(session, ctx);
                Ok(false)
            }
            S3Op::ListMultipartUploads => {
                self.list_uploads(session, ctx).await;
                Ok(false)
            }
            S3Op::CreateMultipartUpload => self.create_upload(session, ctx, &key).await,
            S3Op::UploadPart
            | S3Op::CompleteMultipartUpload
            | S3Op::AbortMultipartUpload
            | S3Op::ListParts
                if crate::upload::our_upload(session).is_some() =>
            {
                let id = crate::upload::our_upload(session).unwrap_or_default();
                match ctx.op {
                    S3Op::UploadPart => self.upload_part(session, ctx, &key, &id).await,
                    S3Op::CompleteMultipartUpload => {
                        self.complete_upload(session, ctx, &key, &id).await
                    }
                    S3Op::AbortMultipartUpload => self.abort_upload(session, ctx, &key, &id).await,
                    _ => self.list_parts(session, ctx, &key, &id).await,
                }
            }
            // A delete or a write the origin takes itself; an object's configuration (tags,
            // retention, ...), which is the origin's: the staged version lands first.
            // A form upload goes to the origin as a PUT of its own (never staged).
            S3Op::DeleteObject | S3Op::CompleteMultipartUpload | S3Op::PostObject => {
                self.flush_key(&key).await
            }
            // A copy reads its source at the origin: a staged source lands first (else the
            // copy would read the version before it, or find none), then the target's.
            S3Op::CopyObject | S3Op::UploadPartCopy => {
                if let Some(source) = copy_source(session) {
                    self.node
                        .flush_object(source.bucket.as_str(), source.key.as_str())
                        .await?;
                }
                match (ctx.op, crate::upload::our_upload(session)) {
                    (S3Op::CopyObject, _) => self.flush_key(&key).await,
                    // Into an upload Floe holds: the origin does not know it.
                    (_, Some(id)) => self.upload_part_copy(session, ctx, &key, &id).await,
                    _ => Ok(false),
                }
            }
            S3Op::Config(c) if c.on_object() => self.flush_key(&key).await,
            // The keys are in the body, which the origin reads as it streams: every staged
            // write of the route lands first, so none propagates over a key it deleted.
            S3Op::DeleteObjects => {
                self.node.learn_staged(&self.bucket, None).await;
                let staged = self.node.staged.all().into_iter();
                for r in staged.filter(|r| r.bucket == self.bucket) {
                    self.flush(&r).await?;
                }
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    async fn upstream_response_filter(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        if let Some(Mode(m)) = ctx.ext.get::<Mode>() {
            resp.insert_header("x-floe-writeback", *m)
                .map_err(S3Error::internal)?;
        }
        if ctx.ext.get::<ListMerge>().is_some() {
            if resp.status.as_u16() == 200 {
                // The merged page has another length.
                resp.remove_header("content-length");
                resp.insert_header("transfer-encoding", "chunked")
                    .map_err(S3Error::internal)?;
            } else {
                ctx.ext.remove::<ListMerge>();
            }
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        let Some(m) = ctx.ext.get_mut::<ListMerge>() else {
            return Ok(());
        };
        if let Some(b) = body.take() {
            m.page.extend_from_slice(&b);
        }
        if end {
            let page = String::from_utf8_lossy(&m.page);
            let merged = match m.uploads.is_empty() {
                true => list::merge(&page, &m.ask, &m.dirty),
                false => crate::list_uploads::merge(&page, &m.ask, &m.uploads),
            };
            *body = Some(Bytes::from(merged));
        }
        Ok(())
    }
}
