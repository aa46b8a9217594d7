//! What follows a staged write's outcome, and the flushes that order an origin-bound request
//! after the staged writes of its key: the request path's durability decisions, on [`Node`]
//! with no HTTP session, so the filter and the test bed ([`crate::testbed`]) run the same code.

use std::sync::Arc;

use floe_core::{S3Error, S3ErrorCode};

use crate::journal::Record;
use crate::node::Node;
use crate::propagate::{origin_of, upload};
use crate::stage::Outcome;

/// How many staged writes of a key a DELETE or origin-bound write puts at the origin first
/// (one unless writes of the key keep arriving while it waits).
const FLUSH_ROUNDS: usize = 4;

/// How a write was acknowledged, for `x-floe-writeback` and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Durable across the fleet, propagated later.
    Staged,
    /// Written to the origin before the answer.
    Sync,
}

impl Settled {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Staged => "staged",
            Self::Sync => "sync",
        }
    }
}

impl Node {
    /// Settles a staged write's `outcome`, `prior` being the key's staged write it overtakes:
    /// that one is freed only once the new write is durable (staged, or at the origin), so a
    /// write that fails leaves the one before it acknowledged. The ETag to answer.
    pub async fn settle(
        self: &Arc<Self>,
        prior: Option<&Arc<Record>>,
        outcome: Outcome,
    ) -> Result<(String, Settled), S3Error> {
        match outcome {
            // It carries on as a staged write: settled as one, then refused.
            Outcome::Unconfirmed(acked, why) => {
                self.overtake(prior, &acked.record).await;
                Err(S3Error::new(floe_core::S3ErrorCode::SlowDown, why))
            }
            Outcome::Staged(acked) => {
                self.overtake(prior, &acked.record).await;
                Ok((acked.record.etag, Settled::Staged))
            }
            Outcome::NeedsSync(r) => {
                self.flush_before(prior, &r).await?;
                let (bucket, key) = (r.bucket.clone(), r.key.clone());
                let etag = self.sync(*r).await?;
                // At the origin now: no node may answer the version it replaced after this.
                self.forget_everywhere(&bucket, &key).await;
                Ok((etag, Settled::Sync))
            }
        }
    }

    /// Staged write `r` overtakes `prior`: that one is freed everywhere before the answer, so
    /// no node propagates it after `r`. A free waits for an upload of it under way (on its
    /// propagating node), and only then may `r` be propagated: the origin ends with `r`.
    async fn overtake(self: &Arc<Self>, prior: Option<&Arc<Record>>, r: &Record) {
        if let Some(p) = prior {
            self.free(p).await;
        }
        self.set_settling(r.id, false);
        self.journaled.notify_one();
    }

    /// Before write `r` goes to the origin itself (`sync`): the staged write before it
    /// (`prior`) lands first, which also frees it; when it cannot, `r` is freed and refused.
    pub async fn flush_before(
        self: &Arc<Self>,
        prior: Option<&Arc<Record>>,
        r: &Record,
    ) -> Result<(), S3Error> {
        let Some(p) = prior else {
            return Ok(());
        };
        if let Err(e) = self.flush(p).await {
            self.free(r).await;
            return Err(e);
        }
        Ok(())
    }

    /// Writes `r` to the origin of its bucket from its fragments, then frees them; the ETag
    /// to answer.
    pub async fn sync(self: &Arc<Self>, r: Record) -> Result<String, S3Error> {
        let origin = self.origins.get().and_then(|o| origin_of(o, &r.bucket));
        let origin = origin.ok_or_else(|| S3Error::internal("no origin for the route"))?;
        let r = Arc::new(r);
        let result = upload(self, &*origin, &r).await;
        self.free(&r).await;
        result.map_err(|e| {
            S3Error::new(
                S3ErrorCode::SlowDown,
                format!("the write could not be made durable: {e}"),
            )
        })?;
        Ok(r.etag.clone())
    }

    /// Before a request on `bucket`/`key` that the origin answers itself (a delete, a copy,
    /// a change of the object's tags): the key's staged writes land first, so whatever the
    /// origin answers, nothing acknowledged is lost or undone (a failed delete leaves the
    /// staged write at the origin, as acknowledged). A newer write staged meanwhile lands too
    /// (a few rounds: a key written without pause overlaps this request anyway).
    /// A staged write of the key this node missed is asked of the others first (see
    /// [`crate::staged_elsewhere`]).
    pub async fn flush_object(self: &Arc<Self>, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.learn_staged(bucket, Some(key)).await;
        for _ in 0..FLUSH_ROUNDS {
            let Some(r) = self.staged.get(bucket, key) else {
                break;
            };
            self.flush(&r).await?;
        }
        Ok(())
    }
}
