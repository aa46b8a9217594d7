//! Reading from the origin outside the proxied request: what a cache filter needs to resolve an
//! object's version and fetch byte ranges of exactly that version.

use async_trait::async_trait;
use bytes::Bytes;

use crate::{BucketName, ETag, ObjectKey};

/// What a HEAD of an object returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHead {
    /// The object's ETag.
    pub etag: ETag,
    /// Its size in bytes.
    pub size: u64,
    /// Response headers worth replaying on a cached answer (Content-Type, Last-Modified,
    /// x-amz-meta-*, ...), lowercase names.
    pub headers: Vec<(String, String)>,
    /// The full-object checksum headers (`x-amz-checksum-*`), when the answer was a whole-object
    /// one asked with `x-amz-checksum-mode: ENABLED` (`Some(empty)`: the object has none);
    /// `None` when unknown (a ranged answer carries none).
    pub checksums: Option<Vec<(String, String)>>,
}

/// A GET of an object's current version: its headers resolve the version, its body serves
/// bytes `first..=last` of it.
pub struct Fetched {
    /// The version the body belongs to.
    pub head: ObjectHead,
    /// First byte of the body.
    pub first: u64,
    /// Last byte of the body, inclusive (no body when the object is empty).
    pub last: u64,
    /// The body.
    pub body: Box<dyn ByteStream>,
}

/// One part of a write uploaded in parts: its length, and the MD5 of its bytes (sent as the
/// part's `Content-MD5`, so the origin checks it, and what its part ETag is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSpan {
    /// Bytes in the part.
    pub len: u64,
    /// MD5 of the part's bytes.
    pub md5: [u8; 16],
}

/// Why an origin read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// The object does not exist (404).
    #[error("object not found")]
    NotFound,
    /// The object changed: If-Match failed (412) or a different ETag came back.
    #[error("object changed at the origin")]
    Changed,
    /// The origin answered an unexpected status.
    #[error("origin answered {0}")]
    Status(u16),
    /// Transport failure, or a body shorter than announced.
    #[error("origin transfer failed: {0}")]
    Transport(String),
}

/// A body arriving from the origin in pieces.
#[async_trait]
pub trait ByteStream: Send {
    /// The next piece; `Ok(None)` at a complete end. A short body is an error, never `None`.
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError>;
}

/// Reads objects from a route's origin, signed as the proxy signs.
///
/// Contract: `get_range` always sends `If-Match: etag` and fails with
/// [`OriginError::Changed`] rather than return bytes of another version.
#[async_trait]
pub trait OriginReader: Send + Sync {
    /// HEAD of the current version; `if_none_match` revalidates a known ETag
    /// (`Ok(None)`: unchanged).
    async fn head(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        if_none_match: Option<&ETag>,
    ) -> Result<Option<ObjectHead>, OriginError>;

    /// GET of the current version with the client's Range header (none: the whole object).
    /// For a key not resolved yet: one round trip resolves the version and brings the bytes,
    /// where a HEAD would cost a round trip of its own. Fails with `Status(416)` for an
    /// unsatisfiable range, `NotFound` for a missing key.
    async fn get_current(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        range: Option<&str>,
    ) -> Result<Fetched, OriginError>;

    /// Writes `key` (PutObject) with `len` bytes from `body` and `headers` (content-type,
    /// x-amz-meta-*, content-md5, ...); returns the origin's ETag. Default: not supported.
    async fn put(
        &self,
        _bucket: &BucketName,
        _key: &ObjectKey,
        _len: u64,
        _headers: &[(String, String)],
        _body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        Err(OriginError::Status(501))
    }

    /// Writes `key` as a multipart upload (create, one UploadPart per span of `parts` read in
    /// order from `body`, complete) with `headers` on the create, so the origin's ETag is S3's
    /// multipart ETag of exactly those parts; returns it. An upload that fails is aborted (best
    /// effort: the origin's own lifecycle reaps what an abort could not reach). Default: not
    /// supported.
    async fn put_parts(
        &self,
        _bucket: &BucketName,
        _key: &ObjectKey,
        _headers: &[(String, String)],
        _parts: &[PartSpan],
        _body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        Err(OriginError::Status(501))
    }

    /// The version of `key` this node itself decides, without I/O: a write acknowledged here
    /// and not at the origin yet (write-back's staged write). A cache resolves to it before it
    /// asks anyone else (an owner that missed the write would answer the version it
    /// replaced). Default: none.
    fn local_head(&self, _bucket: &BucketName, _key: &ObjectKey) -> Option<ObjectHead> {
        None
    }

    /// Called when another node changed `keys` of `bucket` at the origin (its fleet-wide
    /// forget arrived here), after this node dropped its cached answers and before it confirms
    /// the forget: a version this node decides itself ([`OriginReader::local_head`]) that the
    /// fleet has since retired must go before the next read resolves to it. Default: nothing.
    async fn changed_elsewhere(&self, _bucket: &BucketName, _keys: &[String]) {}

    /// HEAD of version `version` of `key` (a `versionId` read): `Ok(None)` when the origin has
    /// no such version. Default: not supported (the read passes to the origin).
    async fn head_version(
        &self,
        _bucket: &BucketName,
        _key: &ObjectKey,
        _version: &str,
    ) -> Result<Option<ObjectHead>, OriginError> {
        Err(OriginError::Status(501))
    }

    /// Bytes `first..=last` of version `version` of `key`, whose ETag is `etag` (sent as
    /// If-Match, as `get_range` does). Default: not supported.
    async fn get_version_range(
        &self,
        _bucket: &BucketName,
        _key: &ObjectKey,
        _version: &str,
        _etag: &ETag,
        _range: (u64, u64),
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        Err(OriginError::Status(501))
    }

    /// Bytes `first..=last` of version `etag`.
    async fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        etag: &ETag,
        first: u64,
        last: u64,
    ) -> Result<Box<dyn ByteStream>, OriginError>;
}
