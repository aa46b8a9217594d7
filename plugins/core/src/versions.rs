//! A cache's knowledge of which version a key reads as, for plugins that change it behind
//! the proxied request. Write-back answers a PUT itself and uploads it to the origin later:
//! the block cache (which sees neither) must forget what it resolved for the key, or a read
//! after the upload could serve the version the write replaced.
//!
//! ```
//! use floe_core::versions::Versions;
//! struct Log(std::sync::Mutex<Vec<String>>);
//! impl Versions for Log {
//!     fn forget(&self, bucket: &str, key: &str) {
//!         self.0.lock().unwrap().push(format!("{bucket}/{key}"));
//!     }
//! }
//! let log = Log(Default::default());
//! log.forget("lake", "t/metadata/version-hint.text");
//! assert_eq!(log.0.lock().unwrap().len(), 1);
//! ```

/// What a cache knows of keys' current versions (shared as `Arc<dyn Versions>`).
///
/// Contract: after `forget(bucket, key)` returns, no read that starts later is served from a
/// version resolved before the call; the next one resolves the key again. Cheap and
/// non-blocking (called on write paths and from background workers).
#[async_trait::async_trait]
pub trait Versions: Send + Sync {
    /// Forgets the version `bucket`/`key` resolved to.
    fn forget(&self, bucket: &str, key: &str);

    /// As [`Versions::forget`], and returns once every member of the fleet forgot it too (or
    /// could not be told in time): for a write the origin took before its answer, so that no
    /// read that starts after the answer, on any node, serves the version it replaced. By
    /// default only this node's (a cache without a fleet).
    async fn forget_everywhere(&self, bucket: &str, key: &str) {
        self.forget(bucket, key);
    }
}
