//! Which object version a reader serves, and the keys of its blocks.

use std::sync::Arc;

use floe_core::{BucketName, ObjectKey};

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
