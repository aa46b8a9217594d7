//! [`OriginReader`] over Pingora's connector: the block cache's HEADs and ranged GETs go
//! through the same signing, connection pool, concurrency bound and breaker as proxied
//! requests.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::uri::uri_encode;
use floe_core::{
    BucketName, ByteStream, ETag, Fetched, ObjectHead, ObjectKey, OriginError, OriginReader,
};
use floe_filter::UpstreamPayload;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use tokio::sync::OwnedSemaphorePermit;

use crate::origin::{Origin, QUEUE_WAIT};

/// Headers of a HEAD answer that a cached answer replays.
const REPLAYED: &[&str] = &[
    "content-type",
    "last-modified",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-version-id",
    "x-amz-storage-class",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-bucket-key-enabled",
    "x-amz-website-redirect-location",
    // What an object's configuration adds (a change of it drops the cached answer:
    // floe_core::subresource): tags, lock, hold, lifecycle expiry, restore, replication.
    "x-amz-tagging-count",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold",
    "x-amz-expiration",
    "x-amz-restore",
    "x-amz-replication-status",
];
const IDLE: Option<Duration> = Some(Duration::from_secs(60));

/// Reads one origin through Pingora.
pub struct PingoraOriginReader {
    origin: Arc<Origin>,
    connector: Arc<Connector>,
}

impl PingoraOriginReader {
    /// A reader for `origin`.
    pub fn new(origin: Arc<Origin>) -> Self {
        Self {
            origin,
            connector: Arc::new(Connector::new(None)),
        }
    }

    async fn send(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        method: &str,
        extra: &[(&str, String)],
    ) -> Result<(HttpSession, HttpPeer, OwnedSemaphorePermit, u16), OriginError> {
        self.send_body(bucket, (key, ""), method, extra, None).await
    }

    /// As `send`, streaming `body` (its length already in `extra`'s content-length), with the
    /// URI query `query` (encoded; `""`: none).
    pub(crate) async fn send_body(
        &self,
        bucket: &BucketName,
        (key, query): (&ObjectKey, &str),
        method: &str,
        extra: &[(&str, String)],
        body: Option<&mut (dyn ByteStream + '_)>,
    ) -> Result<(HttpSession, HttpPeer, OwnedSemaphorePermit, u16), OriginError> {
        let transport = |e: &dyn std::fmt::Display| OriginError::Transport(e.to_string());
        if self.origin.breaker.is_open() {
            return Err(OriginError::Transport("origin breaker open".into()));
        }
        let permit = self
            .origin
            .acquire(QUEUE_WAIT)
            .await
            .ok_or_else(|| transport(&"origin queue full"))?;
        let mut req = RequestHeader::build(method, b"/", None).map_err(|e| transport(&e))?;
        for (k, v) in extra {
            req.insert_header(k.to_string(), v.as_str())
                .map_err(|e| transport(&e))?;
        }
        if let Some(t) = floe_core::trace::current_header() {
            req.insert_header("traceparent", t)
                .map_err(|e| transport(&e))?;
        }
        let raw_key = uri_encode(key.as_str(), true);
        self.origin
            .prepare(
                &mut req,
                bucket.as_str(),
                &raw_key,
                query,
                &UpstreamPayload::Unsigned,
            )
            .map_err(|e| transport(&e))?;
        let peer = self.origin.peer(bucket.as_str());
        let (mut session, _) = match self.connector.get_http_session(&peer).await {
            Ok(s) => s,
            Err(e) => {
                self.origin.breaker.failure();
                return Err(transport(&e));
            }
        };
        // The connector leaves a session's timeouts unset (Pingora's proxy sets them per
        // request): without them a silent origin holds a fill or an upload forever.
        session.set_read_timeout(peer.options.read_timeout);
        session.set_write_timeout(peer.options.write_timeout);
        session
            .write_request_header(Box::new(req))
            .await
            .map_err(|e| transport(&e))?;
        if let Some(body) = body {
            while let Some(piece) = body.next().await? {
                session
                    .write_request_body(piece, false)
                    .await
                    .map_err(|e| transport(&e))?;
            }
        }
        session
            .finish_request_body()
            .await
            .map_err(|e| transport(&e))?;
        session
            .read_response_header()
            .await
            .map_err(|e| transport(&e))?;
        self.origin.breaker.success();
        let status = session.response_header().map_or(0, |h| h.status.as_u16());
        Ok((session, peer, permit, status))
    }
}

impl PingoraOriginReader {
    /// Hands `session` back to the pool once its answer was read whole.
    pub(crate) async fn release(&self, session: HttpSession, peer: &HttpPeer) {
        self.connector
            .release_http_session(session, peer, IDLE)
            .await;
    }
}

/// Asked on every HEAD and resolving GET, so whole-object answers name the object's full-object
/// checksums (kept with the version for checksum-mode clients).
const CHECKSUM_MODE: (&str, &str) = ("x-amz-checksum-mode", "ENABLED");

/// The version an answer describes: its ETag, `size`, the headers a cached answer replays, and,
/// for a whole-object answer, its checksum headers.
fn object_head(
    session: &HttpSession,
    size: Option<u64>,
    whole: bool,
) -> Result<ObjectHead, OriginError> {
    let etag = header(session, "etag").and_then(|e| ETag::parse(&e).ok());
    let (Some(etag), Some(size)) = (etag, size) else {
        return Err(OriginError::Transport("answer without ETag or size".into()));
    };
    let mut headers: Vec<(String, String)> = REPLAYED
        .iter()
        .filter_map(|h| Some(((*h).to_owned(), header(session, h)?)))
        .collect();
    let mut checksums = Vec::new();
    if let Some(h) = session.response_header() {
        for (k, v) in h.headers.iter() {
            let pair = (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned());
            if k.as_str().starts_with("x-amz-meta-") {
                headers.push(pair);
            } else if k.as_str().starts_with("x-amz-checksum-") {
                checksums.push(pair);
            }
        }
    }
    Ok(ObjectHead {
        etag,
        size,
        headers,
        checksums: whole.then_some(checksums),
    })
}

/// `bytes first-last/size` of a 206 answer.
fn content_range(v: &str) -> Option<(u64, u64, u64)> {
    let (span, size) = v.strip_prefix("bytes ")?.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?, size.parse().ok()?))
}

pub(crate) fn header(session: &HttpSession, name: &str) -> Option<String> {
    session
        .response_header()?
        .headers
        .get(name)?
        .to_str()
        .ok()
        .map(str::to_owned)
}

#[async_trait]
impl OriginReader for PingoraOriginReader {
    async fn head(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        if_none_match: Option<&ETag>,
    ) -> Result<Option<ObjectHead>, OriginError> {
        let extra: Vec<(&str, String)> = if_none_match
            .map(|e| ("if-none-match", e.as_str().to_owned()))
            .into_iter()
            .collect();
        self.head_query(bucket, (key, ""), extra).await
    }

    async fn head_version(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        version: &str,
    ) -> Result<Option<ObjectHead>, OriginError> {
        let query = format!("versionId={}", uri_encode(version, true));
        match self.head_query(bucket, (key, &query), Vec::new()).await {
            // No such version (or a delete marker, 405): the origin answers the client itself.
            Err(OriginError::NotFound | OriginError::Status(400 | 405)) => Ok(None),
            other => other,
        }
    }

    async fn get_version_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        version: &str,
        etag: &ETag,
        range: (u64, u64),
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        let query = format!("versionId={}", uri_encode(version, true));
        self.range_once(bucket, (key, &query), etag, range).await
    }

    async fn put(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        len: u64,
        headers: &[(String, String)],
        mut body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        let mut extra: Vec<(&str, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        extra.push(("content-length", len.to_string()));
        let (mut session, peer, _permit, status) = self
            .send_body(bucket, (key, ""), "PUT", &extra, Some(body.as_mut()))
            .await?;
        let etag = header(&session, "etag");
        while let Ok(Some(_)) = session.read_response_body().await {}
        self.connector
            .release_http_session(session, &peer, IDLE)
            .await;
        match status {
            200 => etag
                .and_then(|e| ETag::parse(&e).ok())
                .ok_or_else(|| OriginError::Transport("PUT answer without an ETag".into())),
            404 => Err(OriginError::NotFound),
            s => Err(OriginError::Status(s)),
        }
    }

    async fn put_parts(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        headers: &[(String, String)],
        parts: &[floe_core::PartSpan],
        body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        self.upload_parts(bucket, key, headers, parts, body).await
    }

    async fn get_current(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        range: Option<&str>,
    ) -> Result<Fetched, OriginError> {
        let mut extra: Vec<(&str, String)> =
            range.map(|r| ("range", r.to_owned())).into_iter().collect();
        extra.push((CHECKSUM_MODE.0, CHECKSUM_MODE.1.to_owned()));
        let (session, peer, permit, status) = self.send(bucket, key, "GET", &extra).await?;
        let parsed = match status {
            200 => {
                let size = header(&session, "content-length").and_then(|l| l.parse().ok());
                object_head(&session, size, true).map(|h| {
                    let last = h.size.saturating_sub(1);
                    (h, 0, last)
                })
            }
            206 => match header(&session, "content-range")
                .as_deref()
                .and_then(content_range)
            {
                Some((first, last, size)) if first <= last && last < size => {
                    object_head(&session, Some(size), false).map(|h| (h, first, last))
                }
                _ => Err(OriginError::Transport(
                    "206 without a usable Content-Range".into(),
                )),
            },
            404 => Err(OriginError::NotFound),
            s => Err(OriginError::Status(s)),
        };
        let (head, first, last) = match parsed {
            Ok(p) => p,
            Err(e) => {
                self.connector
                    .release_http_session(session, &peer, IDLE)
                    .await;
                return Err(e);
            }
        };
        let expected = if head.size == 0 { 0 } else { last - first + 1 };
        Ok(Fetched {
            head,
            first,
            last,
            body: Box::new(RangeBody {
                session: Some(session),
                peer,
                connector: self.connector.clone(),
                remaining: expected,
                _permit: permit,
            }),
        })
    }

    async fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        etag: &ETag,
        first: u64,
        last: u64,
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        let Some(hedge) = self.origin.hedge.as_ref() else {
            return self
                .range_once(bucket, (key, ""), etag, (first, last))
                .await;
        };
        let (r, outcome) = hedge
            .run(move || self.range_once(bucket, (key, ""), etag, (first, last)))
            .await;
        crate::ops::metrics::range_read(&self.origin.name, outcome);
        r
    }
}

impl PingoraOriginReader {
    /// A HEAD of `key` with the URI query `query` (a version) and the headers `extra`, in
    /// checksum mode.
    async fn head_query(
        &self,
        bucket: &BucketName,
        (key, query): (&ObjectKey, &str),
        mut extra: Vec<(&str, String)>,
    ) -> Result<Option<ObjectHead>, OriginError> {
        extra.push((CHECKSUM_MODE.0, CHECKSUM_MODE.1.to_owned()));
        let (session, peer, _permit, status) = self
            .send_body(bucket, (key, query), "HEAD", &extra, None)
            .await?;
        let result = match status {
            304 => Ok(None),
            404 => Err(OriginError::NotFound),
            200 => {
                let size = header(&session, "content-length").and_then(|l| l.parse().ok());
                object_head(&session, size, true).map(Some)
            }
            s => Err(OriginError::Status(s)),
        };
        self.connector
            .release_http_session(session, &peer, IDLE)
            .await;
        result
    }

    /// One ranged GET of version `etag` (`If-Match`) of `key` (with the URI query `query`: a
    /// version), answered once its headers are in.
    async fn range_once(
        &self,
        bucket: &BucketName,
        (key, query): (&ObjectKey, &str),
        etag: &ETag,
        (first, last): (u64, u64),
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        let extra = [
            ("range", format!("bytes={first}-{last}")),
            ("if-match", etag.as_str().to_owned()),
        ];
        let (session, peer, permit, status) = self
            .send_body(bucket, (key, query), "GET", &extra, None)
            .await?;
        let got_etag = header(&session, "etag");
        let fail = match status {
            206 | 200 if got_etag.as_deref() == Some(etag.as_str()) => None,
            206 | 200 | 412 => Some(OriginError::Changed),
            404 => Some(OriginError::NotFound),
            s => Some(OriginError::Status(s)),
        };
        if let Some(e) = fail {
            self.connector
                .release_http_session(session, &peer, IDLE)
                .await;
            return Err(e);
        }
        let expected = last - first + 1;
        Ok(Box::new(RangeBody {
            session: Some(session),
            peer,
            connector: self.connector.clone(),
            remaining: expected,
            _permit: permit,
        }))
    }
}

struct RangeBody {
    session: Option<HttpSession>,
    peer: HttpPeer,
    connector: Arc<Connector>,
    remaining: u64,
    _permit: OwnedSemaphorePermit,
}

#[async_trait]
impl ByteStream for RangeBody {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        let Some(session) = self.session.as_mut() else {
            return Ok(None);
        };
        match session.read_response_body().await {
            Ok(Some(b)) => {
                self.remaining = self.remaining.saturating_sub(b.len() as u64);
                Ok(Some(b))
            }
            Ok(None) if self.remaining == 0 => {
                if let Some(s) = self.session.take() {
                    self.connector
                        .release_http_session(s, &self.peer, IDLE)
                        .await;
                }
                Ok(None)
            }
            Ok(None) => Err(OriginError::Transport(format!(
                "origin body ended {} bytes short",
                self.remaining
            ))),
            Err(e) => Err(OriginError::Transport(e.to_string())),
        }
    }
}
