//! A read of a staged write that outlives its staging: propagation may finish, and free the
//! fragments, while a GET of the write is still streaming (a large object, a slow client).
//! The write is then at the origin, the same version: its ETag is the MD5 Floe answered, and
//! the origin confirmed it before the fragments were freed. So when a stripe cannot be read
//! any more, the rest is read from the origin with `If-Match` on that ETag; if the origin does
//! not have that version (the read failed for another reason, or a newer write replaced it
//! there), the read fails as it would have, never with another version's bytes.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{BucketName, ByteStream, ETag, ObjectKey, OriginError, OriginReader};

use crate::journal::Record;
use crate::node::Node;
use crate::read::RecordStream;

/// Where the rest of a read comes from once the fragments are gone.
struct Fallback {
    origin: Arc<dyn OriginReader>,
    bucket: BucketName,
    key: ObjectKey,
    etag: ETag,
}

/// Bytes `first..=last` of a staged write, finishing from the origin if need be.
pub struct ReadThrough {
    staged: RecordStream,
    fallback: Option<Fallback>,
    from_origin: Option<Box<dyn ByteStream>>,
    at: u64,
    last: u64,
}

impl ReadThrough {
    /// Bytes `first..=last` of `r`; `origin` (the route's) takes over when its fragments go.
    pub fn new(
        node: &Arc<Node>,
        r: Arc<Record>,
        first: u64,
        last: u64,
        origin: Option<Arc<dyn OriginReader>>,
    ) -> Self {
        let fallback = origin.and_then(|origin| {
            Some(Fallback {
                origin,
                bucket: BucketName::parse(&r.bucket).ok()?,
                key: ObjectKey::parse(&r.key).ok()?,
                etag: ETag::parse(&r.etag).ok()?,
            })
        });
        Self {
            staged: node.range(r, first, last),
            fallback,
            from_origin: None,
            at: first,
            last,
        }
    }

    /// The rest from the origin, or `why` when it does not have this version.
    async fn switch(&mut self, why: OriginError) -> Result<(), OriginError> {
        let Some(f) = &self.fallback else {
            return Err(why);
        };
        match f
            .origin
            .get_range(&f.bucket, &f.key, &f.etag, self.at, self.last)
            .await
        {
            Ok(s) => {
                tracing::info!(key = %f.key.as_str(), at = self.at, error = %why, "staged fragments gone mid-read: the rest from the origin");
                crate::metrics::read_through();
                self.from_origin = Some(s);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(key = %f.key.as_str(), error = %why, origin = %e, "a staged read failed and the origin has no such version");
                Err(why)
            }
        }
    }
}

#[async_trait]
impl ByteStream for ReadThrough {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        if self.from_origin.is_none() {
            match self.staged.next().await {
                Ok(b) => {
                    self.at += b.as_ref().map_or(0, |b| b.len() as u64);
                    return Ok(b);
                }
                Err(why) => self.switch(why).await?,
            }
        }
        match self.from_origin.as_mut() {
            Some(s) => s.next().await,
            None => Ok(None),
        }
    }
}
