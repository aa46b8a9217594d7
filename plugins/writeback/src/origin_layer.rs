//! Staged writes as the route's later stages see the origin: a key with an acknowledged,
//! unpropagated write resolves to that write (its ETag, size and headers) and its bytes come
//! from the fragments, so the block cache after write-back on a route serves a staged write
//! like any object, caching its blocks under the write's ETag. That ETag is the MD5 the
//! origin reports once the write is propagated, so the cached blocks stay right after it.
//! Keys with no staged write, and versions other than the staged one, pass to the origin.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use floe_core::range::{resolve, RangeAsk};
use floe_core::{
    BucketName, ByteStream, ETag, Fetched, ObjectHead, ObjectKey, OriginError, OriginReader,
};

use crate::journal::Record;
use crate::node::Node;
use crate::read_through::ReadThrough;

/// The route's origin with this node's staged writes in front.
pub struct StagedOrigin {
    /// The node.
    pub node: Arc<Node>,
    /// The origin behind.
    pub inner: Arc<dyn OriginReader>,
}

/// What a HEAD of staged write `r` answers.
pub fn head_of(r: &Record) -> Result<ObjectHead, OriginError> {
    let etag = ETag::parse(&r.etag).map_err(|e| OriginError::Transport(e.to_string()))?;
    let mut headers = r.headers.clone();
    let modified = UNIX_EPOCH + Duration::from_millis(r.acked_ms);
    headers.push(("last-modified".into(), httpdate::fmt_http_date(modified)));
    Ok(ObjectHead {
        etag,
        size: r.geometry.size,
        headers,
        checksums: None,
    })
}

impl StagedOrigin {
    fn staged(&self, bucket: &BucketName, key: &ObjectKey) -> Option<Arc<Record>> {
        self.node.staged.get(bucket.as_str(), key.as_str())
    }

    fn stream(&self, r: Arc<Record>, first: u64, last: u64) -> Box<dyn ByteStream> {
        if r.geometry.size == 0 {
            return Box::new(Empty);
        }
        let inner = Some(self.inner.clone());
        Box::new(ReadThrough::new(&self.node, r, first, last, inner))
    }
}

/// The body of an empty object.
struct Empty;

#[async_trait]
impl ByteStream for Empty {
    async fn next(&mut self) -> Result<Option<bytes::Bytes>, OriginError> {
        Ok(None)
    }
}

#[async_trait]
impl OriginReader for StagedOrigin {
    fn local_head(&self, bucket: &BucketName, key: &ObjectKey) -> Option<ObjectHead> {
        let staged = self.staged(bucket, key)?;
        head_of(&staged).ok()
    }

    /// A staged write of a key another node changed at the origin is checked with its holders:
    /// one the fleet freed (its freeing node died before it reached this one) is freed here,
    /// and everywhere else it may still be, before the change's forget is confirmed.
    async fn changed_elsewhere(&self, bucket: &BucketName, keys: &[String]) {
        for key in keys {
            let Some(r) = self.node.staged.get(bucket.as_str(), key) else {
                continue;
            };
            if self.node.freed_elsewhere(&r).await {
                tracing::info!(id = %r.id, key = %r.key, "a write the fleet freed, still indexed here: freed now");
                self.node.free(&r).await;
            }
        }
    }

    async fn head(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        if_none_match: Option<&ETag>,
    ) -> Result<Option<ObjectHead>, OriginError> {
        let Some(r) = self.staged(bucket, key) else {
            return self.inner.head(bucket, key, if_none_match).await;
        };
        if if_none_match.is_some_and(|e| e.as_str() == r.etag) {
            return Ok(None);
        }
        head_of(&r).map(Some)
    }

    async fn get_current(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        range: Option<&str>,
    ) -> Result<Fetched, OriginError> {
        let Some(r) = self.staged(bucket, key) else {
            return self.inner.get_current(bucket, key, range).await;
        };
        let size = r.geometry.size;
        let (first, last) = match resolve(range, size) {
            RangeAsk::Part { first, last } => (first, last),
            RangeAsk::Unsatisfiable => return Err(OriginError::Status(416)),
            RangeAsk::Whole | RangeAsk::Multi => (0, size.saturating_sub(1)),
        };
        Ok(Fetched {
            head: head_of(&r)?,
            first,
            last,
            body: self.stream(r, first, last),
        })
    }

    async fn put(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        len: u64,
        headers: &[(String, String)],
        body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        self.inner.put(bucket, key, len, headers, body).await
    }

    async fn put_parts(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        headers: &[(String, String)],
        parts: &[floe_core::PartSpan],
        body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        self.inner
            .put_parts(bucket, key, headers, parts, body)
            .await
    }

    /// A version the origin keeps: staged writes have no version id yet.
    async fn head_version(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        version: &str,
    ) -> Result<Option<ObjectHead>, OriginError> {
        self.inner.head_version(bucket, key, version).await
    }

    async fn get_version_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        version: &str,
        etag: &ETag,
        range: (u64, u64),
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        self.inner
            .get_version_range(bucket, key, version, etag, range)
            .await
    }

    async fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        etag: &ETag,
        first: u64,
        last: u64,
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        match self.staged(bucket, key) {
            Some(r) if r.etag == etag.as_str() => Ok(self.stream(r, first, last)),
            _ => self.inner.get_range(bucket, key, etag, first, last).await,
        }
    }
}
