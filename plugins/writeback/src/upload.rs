//! The `writeback` stage's multipart calls (see [`crate::multipart`] for how parts are staged).

use bytes::{Bytes, BytesMut};
use floe_core::{xml_escape, S3Error, S3ErrorCode};
use floe_filter::FilterCtx;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::filter::WritebackFilter;
use crate::multipart::{chosen_parts, parse_complete, PartsBody, PREFIX};
use crate::propagate::origin_of;
use crate::session_body::{body_size, continue_body, kept_headers, origin_only, SessionBody};
use crate::stage::{BodySource, Object};

/// Largest CompleteMultipartUpload body read (10,000 parts of ~100 bytes).
const MAX_COMPLETE_BODY: usize = 2 << 20;

/// The raw (still percent-encoded) value of query parameter `name`.
pub(crate) fn query<'a>(session: &'a Session, name: &str) -> Option<&'a str> {
    session
        .req_header()
        .uri
        .query()?
        .split('&')
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The request's `partNumber`, 1 to 10,000.
pub(crate) fn part_number(session: &Session) -> Result<u32, S3Error> {
    query(session, "partNumber")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })
}

/// This route's upload id of the request, when Floe handed it out.
pub fn our_upload(session: &Session) -> Option<String> {
    query(session, "uploadId")
        .filter(|id| id.starts_with(PREFIX))
        .map(str::to_owned)
}

pub(crate) async fn answer(
    session: &mut Session,
    ctx: &FilterCtx,
    status: u16,
    headers: &[(&'static str, String)],
    body: String,
) -> Result<bool, S3Error> {
    let mut resp =
        ResponseHeader::build(status, Some(4 + headers.len())).map_err(S3Error::internal)?;
    resp.insert_header("content-length", body.len().to_string())
        .map_err(S3Error::internal)?;
    if !body.is_empty() {
        resp.insert_header("content-type", "application/xml")
            .map_err(S3Error::internal)?;
    }
    for (k, v) in headers {
        resp.insert_header(*k, v.as_str())
            .map_err(S3Error::internal)?;
    }
    resp.insert_header("x-amz-request-id", ctx.request_id.to_string())
        .map_err(S3Error::internal)?;
    let empty = body.is_empty();
    session
        .write_response_header(Box::new(resp), empty)
        .await
        .map_err(S3Error::internal)?;
    if !empty {
        session
            .write_response_body(Some(Bytes::from(body)), true)
            .await
            .map_err(S3Error::internal)?;
    }
    Ok(true)
}

const NS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

impl WritebackFilter {
    /// CreateMultipartUpload: staged here when w nodes are eligible, else the origin's.
    pub(crate) async fn create_upload(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
    ) -> Result<bool, S3Error> {
        let Some(opts) = self.opts else {
            return Ok(false);
        };
        if self.node.coordinator().plan(&opts, 0).is_none() || origin_only(session) {
            return Ok(false);
        }
        let (node, up) = (
            self.node.clone(),
            crate::multipart::Upload::new(&self.bucket, key, kept_headers(session)),
        );
        let id = tokio::task::spawn_blocking(move || node.uploads.create(up))
            .await
            .map_err(S3Error::internal)??;
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult xmlns=\"{NS}\"><Bucket>{}</Bucket><Key>{}</Key><UploadId>{id}</UploadId></InitiateMultipartUploadResult>",
            xml_escape(&self.bucket),
            xml_escape(key)
        );
        answer(
            session,
            ctx,
            200,
            &[("x-floe-writeback", "staged".into())],
            body,
        )
        .await
    }

    /// UploadPart of an upload Floe handed out: the part is staged (w fsyncs) before the 200.
    pub(crate) async fn upload_part(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
        id: &str,
    ) -> Result<bool, S3Error> {
        let Some(opts) = self.opts else {
            return Ok(false);
        };
        self.node.learn_upload(id, key).await?;
        let n = part_number(session)?;
        let size = body_size(session).ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::MissingContentLength,
                "You must provide the Content-Length HTTP header.",
            )
        })?;
        let plan = self.part_plan(&opts, size)?;
        if !ctx.body_stage.as_mut().is_none_or(|s| s.plain()) {
            return Err(S3Error::new(
                S3ErrorCode::NotImplemented,
                "This body encoding cannot be staged.",
            ));
        }
        let expected = crate::session_body::expected_digests(session)?;
        let preread = continue_body(session, ctx).await?;
        let obj = Object {
            bucket: &self.bucket,
            key,
            headers: Vec::new(),
            expected,
            parts: Vec::new(),
        };
        let record = {
            let mut body = SessionBody::new(session, ctx.body_stage.as_mut(), preread);
            self.node
                .coordinator()
                .stage_part(plan, obj, &mut body, &mut ctx.phases)
                .await?
        };
        let etag = self.keep_part(id, n, record).await?;
        answer(
            session,
            ctx,
            200,
            &[("etag", etag), ("x-floe-writeback", "staged".into())],
            String::new(),
        )
        .await
    }

    /// Where a part of `size` bytes is staged; 503 while too few nodes can take it.
    pub(crate) fn part_plan(
        &self,
        opts: &crate::config::RouteOptions,
        size: u64,
    ) -> Result<crate::stage::Plan, S3Error> {
        self.node.coordinator().plan(opts, size).ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::SlowDown,
                "Too few write-back nodes for this part; retry.",
            )
        })
    }

    /// Keeps staged `record` as part `n` of upload `id` and frees the part it replaces; the
    /// part's ETag.
    pub(crate) async fn keep_part(
        &self,
        id: &str,
        n: u32,
        record: crate::journal::Record,
    ) -> Result<String, S3Error> {
        let etag = record.etag.clone();
        let (node, upload) = (self.node.clone(), id.to_owned());
        let old = tokio::task::spawn_blocking(move || node.uploads.put_part(&upload, n, record))
            .await
            .map_err(S3Error::internal)??;
        if let Some(old) = old {
            self.node.free(&old).await;
        }
        Ok(etag)
    }

    /// CompleteMultipartUpload: the chosen parts, re-encoded as one staged write.
    pub(crate) async fn complete_upload(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
        id: &str,
    ) -> Result<bool, S3Error> {
        let Some(opts) = self.opts else {
            return Ok(false);
        };
        let doc = self.read_small_body(session, ctx).await?;
        let chosen = parse_complete(&String::from_utf8_lossy(&doc))?;
        let up = self.node.upload_view(id, key).await?;
        let parts = chosen_parts(&up, &chosen)?;
        // Overtaken only once this write is durable (see `put`).
        let prior = self.node.staged.get(&self.bucket, key);
        let total: u64 = parts.iter().map(|p| p.geometry.size).sum();
        let spans = crate::multipart::spans(&parts);
        let obj = Object {
            bucket: &self.bucket,
            key,
            headers: up.headers.clone(),
            // Each part was checked against its own digests when it was staged.
            expected: crate::digests::Expected::default(),
            parts: spans.clone(),
        };
        let mut body = PartsBody::new(self.node.clone(), parts);
        let started = std::time::Instant::now();
        let (etag, mode) = match self.node.coordinator().plan(&opts, total) {
            Some(plan) => {
                let outcome = self
                    .node
                    .coordinator()
                    .stage(plan, obj, &mut body, &mut ctx.phases)
                    .await?;
                let (etag, settled) = self.node.settle(prior.as_ref(), outcome).await?;
                (etag, settled.as_str())
            }
            None => {
                if let Some(p) = &prior {
                    self.flush(p).await?;
                }
                let etag = self.parts_to_origin(key, &spans, &up.headers, body).await?;
                // At the origin now: no node may answer the version it replaced after this.
                self.node.forget_everywhere(&self.bucket, key).await;
                (etag, "sync")
            }
        };
        crate::metrics::put(mode, started.elapsed());
        self.node.forget_upload(id).await;
        for p in up.parts.values() {
            self.node.free(p).await;
        }
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult xmlns=\"{NS}\"><Location>/{}/{}</Location><Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></CompleteMultipartUploadResult>",
            xml_escape(&self.bucket), xml_escape(key), xml_escape(&self.bucket), xml_escape(key), xml_escape(&etag)
        );
        answer(
            session,
            ctx,
            200,
            &[("x-floe-writeback", mode.into())],
            body,
        )
        .await
    }

    /// AbortMultipartUpload: the staged parts are freed.
    pub(crate) async fn abort_upload(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
        id: &str,
    ) -> Result<bool, S3Error> {
        let up = self.node.upload_view(id, key).await?;
        self.node.forget_upload(id).await;
        for p in up.parts.values() {
            self.node.free(p).await;
        }
        answer(session, ctx, 204, &[], String::new()).await
    }

    /// The completed upload straight to the origin, as the same parts (its ETag is S3's
    /// multipart ETag there too).
    async fn parts_to_origin(
        &self,
        key: &str,
        parts: &[crate::journal::Part],
        headers: &[(String, String)],
        body: PartsBody,
    ) -> Result<String, S3Error> {
        let origin = origin_of(&self.origins, &self.bucket);
        let origin = origin.ok_or_else(|| S3Error::internal("no origin for the route"))?;
        let (b, k) = (
            floe_core::BucketName::parse(&self.bucket).map_err(S3Error::internal)?,
            floe_core::ObjectKey::parse(key).map_err(S3Error::internal)?,
        );
        let spans = crate::journal::spans(parts).map_err(S3Error::internal)?;
        let etag = origin
            .put_parts(&b, &k, headers, &spans, Box::new(body))
            .await
            .map_err(|e| {
                S3Error::new(
                    S3ErrorCode::SlowDown,
                    format!("the upload could not be completed: {e}"),
                )
            })?;
        Ok(etag.as_str().to_owned())
    }

    async fn read_small_body(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
    ) -> Result<BytesMut, S3Error> {
        if !ctx.body_stage.as_mut().is_none_or(|s| s.plain()) {
            return Err(S3Error::new(
                S3ErrorCode::NotImplemented,
                "This body encoding cannot be read here.",
            ));
        }
        let preread = continue_body(session, ctx).await?;
        let mut body = SessionBody::new(session, ctx.body_stage.as_mut(), preread);
        let mut doc = BytesMut::new();
        while let Some(b) = body.next().await? {
            doc.extend_from_slice(&b);
            if doc.len() > MAX_COMPLETE_BODY {
                return Err(S3Error::new(
                    S3ErrorCode::MalformedXML,
                    "The CompleteMultipartUpload body is too large.",
                ));
            }
        }
        Ok(doc)
    }
}
