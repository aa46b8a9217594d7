//! Which object version a reader serves, and the keys of its blocks.

use std::sync::Arc;

use floe_core::{BucketName, ByteStream, ObjectKey, OriginError, OriginReader};

use crate::mapping::Mapping;
use crate::store::BlockKey;

/// Identity of the object a reader serves.
#[derive(Clone)]
pub struct Target {
    /// Bucket (validated).
    pub bucket: BucketName,
    /// Key (validated).
    pub key: ObjectKey,
    /// Shared bucket text for block keys.
    pub bucket_key: Arc<str>,
    /// Shared key text for block keys.
    pub object_key: Arc<str>,
    /// The resolved version.
    pub map: Arc<Mapping>,
}

impl Target {
    /// Bytes `first..=last` of this version from `origin`, with If-Match on its ETag (and its
    /// version id, for a `versionId` read).
    pub async fn read_origin(
        &self,
        origin: &dyn OriginReader,
        (first, last): (u64, u64),
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        let (bucket, key, etag) = (&self.bucket, &self.key, &self.map.etag);
        match &self.map.version_id {
            None => origin.get_range(bucket, key, etag, first, last).await,
            Some(v) => {
                let range = (first, last);
                origin.get_version_range(bucket, key, v, etag, range).await
            }
        }
    }

    /// The key of block `index` of this version with blocks of `block_bytes`.
    pub fn block_key(&self, index: u64, block_bytes: u64) -> BlockKey {
        BlockKey {
            bucket: self.bucket_key.clone(),
            key: self.object_key.clone(),
            etag: self.map.etag_key.clone(),
            block_bytes: block_bytes as u32,
            index,
        }
    }
}
