//! Reads that name a version (`versionId=V`): an old version is immutable, so it is cached
//! under its own ETag like any other, resolved with a HEAD of that version and filled with
//! ranged GETs of that version (If-Match on its ETag). Its mapping lives in a table of its own
//! (never the current version's), kept in memory only and filled on this node (a peer fills
//! the current version only).

use std::sync::Arc;

use floe_core::OriginError;
use floe_filter::FilterCtx;

use crate::filter::BlockFilter;
use crate::inflight::{wait_for, Claim};
use crate::mapping::Mapping;
use crate::resolve::Resolution;

/// Most version mappings one route keeps (least recently used out; a dropped one costs a HEAD).
pub const MAX_VERSION_MAPPINGS: usize = 1 << 16;

/// The name of version `version` of `key` in the version table and the single-flight map (a
/// NUL never appears in an S3 key a client can address through Floe's paths).
fn version_name(key: &str, version: &str) -> String {
    format!("{key}\0{version}")
}

impl BlockFilter {
    /// Resolves version `version` of the request's key: `Ok(None)` means "let the origin
    /// answer" (no such version, a delete marker, an origin that cannot say).
    pub(crate) async fn resolve_version(
        &self,
        ctx: &FilterCtx,
        version: &str,
    ) -> Result<Option<Resolution>, OriginError> {
        let (Some(bucket), Some(key)) = (&ctx.bucket, &ctx.key) else {
            return Ok(None);
        };
        let name = version_name(key.as_str(), version);
        if let Some(map) = self.versions.get(&name) {
            return Ok(Some(Resolution {
                map,
                known: true,
                adopted: None,
            }));
        }
        let resolved = match self.resolving.claim(&name) {
            Claim::Theirs(rx) => {
                let abandoned = Err(OriginError::Transport("resolve abandoned".into()));
                wait_for(rx, abandoned).await
            }
            Claim::Mine(tx) => {
                let head = self.origin.head_version(bucket, key, version).await;
                let resolved = head.map(|found| {
                    found.map(|head| {
                        let mut class = self.class_of(key.as_str());
                        class.immutable = true; // a version never changes
                        let map = Arc::new(Mapping {
                            version_id: Some(Arc::from(version)),
                            ..Mapping::new(head, class)
                        });
                        self.versions.put(&name, map.clone());
                        (map, false)
                    })
                });
                let _ = tx.send(Some(resolved.clone()));
                self.resolving.release(&name);
                resolved
            }
        };
        Ok(resolved?.map(|(map, known)| Resolution {
            map,
            known,
            adopted: None,
        }))
    }

    /// Drops the mapping of version `version` of `key` (a DeleteObject of that version).
    pub(crate) fn forget_version(&self, key: &str, version: &str) {
        self.versions.drop_key(&version_name(key, version));
    }
}
