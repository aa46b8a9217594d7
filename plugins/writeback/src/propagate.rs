//! Propagation: the coordinator uploads each write it acknowledged to the origin, rebuilt from
//! its fragments, with `Content-MD5` so the origin itself checks the bytes (a write completed
//! from parts goes up as the same parts, each with its own); only once the
//! origin answered 200 are the journal record and the fragments freed. Failures back off
//! (doubling from 250 ms to `retry_max_ms`). A write superseded by a later one of its key is
//! freed without an upload: the later one wins, as it would at the origin.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine;
use floe_core::{BucketName, ObjectKey, OriginError, OriginReader};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::task::JoinSet;

use crate::journal::Record;
use crate::node::Node;

/// Origins by route bucket (each route's stage registers its own).
pub type Origins = Arc<RwLock<HashMap<String, Arc<dyn OriginReader>>>>;

/// The origin of `bucket`'s route.
pub fn origin_of(origins: &Origins, bucket: &str) -> Option<Arc<dyn OriginReader>> {
    origins.read().ok()?.get(bucket).cloned()
}

/// What propagation has done (shown by `GET /writeback`).
#[derive(Debug, Default)]
pub struct Counts {
    /// Writes uploaded to the origin.
    pub propagated: AtomicU64,
    /// Bytes uploaded.
    pub bytes: AtomicU64,
    /// Uploads that failed (and will be retried).
    pub failures: AtomicU64,
    /// Writes freed unpropagated because a later write of their key superseded them.
    pub superseded: AtomicU64,
}

/// Uploads `r` to `origin`.
pub async fn upload(
    node: &Arc<Node>,
    origin: &dyn OriginReader,
    r: &Arc<Record>,
) -> Result<(), OriginError> {
    let bad = |e: floe_core::NameError| OriginError::Transport(e.to_string());
    let bucket = BucketName::parse(&r.bucket).map_err(bad)?;
    let key = ObjectKey::parse(&r.key).map_err(bad)?;
    let size = r.geometry.size;
    let _running = node.uploading.running(r.id, &r.bucket, &r.key);
    let body = node.range(r.clone(), 0, size.saturating_sub(1));
    let body: Box<dyn floe_core::ByteStream> = if size == 0 {
        Box::new(Empty)
    } else {
        Box::new(Fenced::new(body, size, floe_core::away::Away::global()))
    };
    let etag = if r.parts.is_empty() {
        let mut headers = r.headers.clone();
        let md5 = crate::etag::md5_of(&r.etag)
            .ok_or_else(|| OriginError::Transport(format!("ETag {} is not an MD5", r.etag)))?;
        headers.push((
            "content-md5".into(),
            base64::engine::general_purpose::STANDARD.encode(md5),
        ));
        origin.put(&bucket, &key, size, &headers, body).await?
    } else {
        // The same parts: the origin's ETag is then the one the client was answered.
        let spans = crate::journal::spans(&r.parts)?;
        origin
            .put_parts(&bucket, &key, &r.headers, &spans, body)
            .await?
    };
    if etag.as_str() != r.etag {
        // Content-MD5 made the origin check the bytes; an origin whose ETag is not the MD5
        // (SSE-KMS, say) answers another one.
        tracing::debug!(id = %r.id, origin = %etag.as_str(), "origin ETag is not the MD5");
    }
    Ok(())
}

/// Whether the origin already holds exactly `r`.
pub async fn at_origin(origin: &dyn OriginReader, r: &Record) -> bool {
    let (Ok(b), Ok(k)) = (BucketName::parse(&r.bucket), ObjectKey::parse(&r.key)) else {
        return false;
    };
    matches!(origin.head(&b, &k, None).await, Ok(Some(h)) if h.etag.as_str() == r.etag && h.size == r.geometry.size)
}

/// Whether the origin holds another version of `r`'s key written after `r` was acknowledged
/// (Last-Modified has whole seconds; a second of slack either way).
pub async fn newer_at_origin(origin: &dyn OriginReader, r: &Record) -> bool {
    let (Ok(b), Ok(k)) = (BucketName::parse(&r.bucket), ObjectKey::parse(&r.key)) else {
        return false;
    };
    let Ok(Some(h)) = origin.head(&b, &k, None).await else {
        return false;
    };
    let modified = h
        .headers
        .iter()
        .find(|(n, _)| n == "last-modified")
        .and_then(|(_, v)| httpdate::parse_http_date(v).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    h.etag.as_str() != r.etag && modified + 1000 >= r.acked_ms
}

/// An upload's body whose last piece is withheld when this process was away (frozen) since
/// the upload began: its peers may have counted it gone meanwhile and let a DELETE or a newer
/// write of the key through to the origin, and a copy finished now would land after it. The
/// origin, short of the declared length, stores nothing; the write is tried again if it is
/// still this node's to propagate. (A freeze after the last piece left is over by the time
/// any peer acts: the origin has the whole body then.)
struct Fenced<B> {
    inner: B,
    left: u64,
    away: &'static floe_core::away::Away,
    mark: u64,
}

impl<B> Fenced<B> {
    fn new(inner: B, size: u64, away: &'static floe_core::away::Away) -> Self {
        Self {
            inner,
            left: size,
            away,
            mark: away.mark(),
        }
    }
}

#[async_trait]
impl<B: floe_core::ByteStream> floe_core::ByteStream for Fenced<B> {
    async fn next(&mut self) -> Result<Option<bytes::Bytes>, OriginError> {
        let piece = self.inner.next().await?;
        if let Some(p) = &piece {
            self.left = self.left.saturating_sub(p.len() as u64);
            if self.left == 0 && self.away.away_since_now(self.mark).is_some() {
                return Err(OriginError::Transport(
                    "this node was away during the upload: its last piece is withheld".into(),
                ));
            }
        }
        Ok(piece)
    }
}

struct Empty;

#[async_trait]
impl floe_core::ByteStream for Empty {
    async fn next(&mut self) -> Result<Option<bytes::Bytes>, OriginError> {
        Ok(None)
    }
}

/// The propagation worker ("floe-writeback-propagate").
pub struct Propagator {
    /// This node's write-back state.
    pub node: Arc<Node>,
    /// Origins by bucket.
    pub origins: Origins,
    /// Longest retry wait.
    pub retry_max: Duration,
    /// Uploads at once.
    pub concurrency: usize,
    /// Progress.
    pub counts: Arc<Counts>,
}

impl Propagator {
    /// One pass over this node's dirty writes; returns when the next one is due.
    pub(crate) async fn pass(
        &self,
        due: &mut HashMap<crate::id::ObjectId, (Instant, Duration)>,
    ) -> Duration {
        let mut wait = self.retry_max;
        // A node catching up (at start, or back from a freeze) may index a write the fleet
        // freed or overtook meanwhile: nothing goes to the origin before it knows.
        if !self.node.is_caught_up() {
            return Duration::from_millis(100);
        }
        // Superseded writes go first: none may reach the origin after the write that won.
        for r in self.node.take_retired() {
            self.counts.superseded.fetch_add(1, Ordering::Relaxed);
            due.remove(&r.id);
            self.node.free(&r).await;
        }
        let mut running = JoinSet::new();
        for r in self
            .node
            .staged
            .all()
            .into_iter()
            .filter(|r| self.node.propagates(r) && self.node.settled(r))
        {
            let now = Instant::now();
            if let Some((at, _)) = due.get(&r.id) {
                if *at > now {
                    wait = wait.min(*at - now);
                    continue;
                }
            }
            if self
                .node
                .staged
                .get(&r.bucket, &r.key)
                .is_none_or(|cur| cur.id != r.id)
            {
                self.counts.superseded.fetch_add(1, Ordering::Relaxed);
                self.node.free(&r).await;
                continue;
            }
            let Some(origin) = origin_of(&self.origins, &r.bucket) else {
                wait = wait.min(Duration::from_millis(250));
                continue;
            };
            while running.len() >= self.concurrency.max(1) {
                if let Some(Ok(done)) = running.join_next().await {
                    self.settle(done, due, &mut wait).await;
                }
            }
            let node = self.node.clone();
            running.spawn(async move {
                // Under the write's upload lock, and only while it is still the key's staged
                // write: a request that put it at the origin first (and maybe deleted or
                // overwrote it there since) must not see it land again.
                let _held = node.uploading.lock(&r.bucket, &r.key).await;
                // Marked running before it looks: a free of it that unindexes it after this
                // look waits for the upload (see `crate::uploading`).
                let _running = node.uploading.running(r.id, &r.bucket, &r.key);
                if !node.staged.current(&r) || !node.is_caught_up() {
                    return (r, None, false);
                }
                let started = floe_core::spans::Started::now();
                let uploaded = upload(&node, &*origin, &r).await;
                crate::metrics::background("propagate", started, r.id);
                // A failure for a write the origin already holds: another node propagated it
                // (this one was away when it was freed).
                let there = uploaded.is_err() && at_origin(&*origin, &r).await;
                (r, Some(uploaded), there)
            });
        }
        while let Some(done) = running.join_next().await {
            if let Ok(done) = done {
                self.settle(done, due, &mut wait).await;
            }
        }
        wait
    }

    /// Frees a propagated write, or schedules a failed one's retry.
    async fn settle(
        &self,
        (r, uploaded, there): (Arc<Record>, Option<Result<(), OriginError>>, bool),
        due: &mut HashMap<crate::id::ObjectId, (Instant, Duration)>,
        wait: &mut Duration,
    ) {
        // Not uploaded: no longer the key's staged write (whoever took it over frees it).
        let Some(uploaded) = uploaded else {
            due.remove(&r.id);
            return;
        };
        match uploaded {
            Ok(()) => {
                self.counts.propagated.fetch_add(1, Ordering::Relaxed);
                self.counts
                    .bytes
                    .fetch_add(r.geometry.size, Ordering::Relaxed);
                due.remove(&r.id);
                self.node.free_propagated(&r).await;
            }
            Err(_) if there => {
                due.remove(&r.id);
                self.node.free_propagated(&r).await;
            }
            Err(e) => {
                self.counts.failures.fetch_add(1, Ordering::Relaxed);
                let back = due.get(&r.id).map_or(Duration::from_millis(250), |(_, b)| {
                    (*b * 2).min(self.retry_max)
                });
                tracing::info!(id = %r.id, key = %r.key, error = %e, retry_in = ?back, "propagation failed");
                due.insert(r.id, (Instant::now() + back, back));
                *wait = (*wait).min(back);
            }
        }
    }
}

#[async_trait]
impl BackgroundService for Propagator {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut due = HashMap::new();
        loop {
            let wait = self.pass(&mut due).await;
            tokio::select! {
                _ = self.node.journaled.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_core::away::Away;
    use floe_core::ByteStream;

    /// Three pieces of 4 bytes; `thaw` runs before the last one is read.
    struct Pieces<'a> {
        n: u8,
        thaw: &'a (dyn Fn() + Sync),
    }

    #[async_trait]
    impl ByteStream for Pieces<'_> {
        async fn next(&mut self) -> Result<Option<bytes::Bytes>, OriginError> {
            self.n += 1;
            if self.n == 3 {
                (self.thaw)();
            }
            Ok((self.n <= 3).then(|| bytes::Bytes::from(vec![self.n; 4])))
        }
    }

    async fn read_all(body: &mut dyn ByteStream) -> Result<usize, OriginError> {
        let mut n = 0;
        while let Some(p) = body.next().await? {
            n += p.len();
        }
        Ok(n)
    }

    #[tokio::test]
    async fn an_upload_away_since_it_began_withholds_its_last_piece() {
        let away: &'static Away = Box::leak(Box::new(Away::new()));
        let now = away.mono_ms();
        away.tick_at(now, 1_000);
        let none = || ();
        let mut calm = Fenced::new(Pieces { n: 0, thaw: &none }, 12, away);
        assert_eq!(read_all(&mut calm).await.unwrap(), 12);
        // Frozen for 5 s between its second piece and its last.
        let thaw = || away.tick_at(now + 5_000, 6_000);
        let mut frozen = Fenced::new(Pieces { n: 0, thaw: &thaw }, 12, away);
        assert!(frozen.next().await.unwrap().is_some());
        assert!(frozen.next().await.unwrap().is_some());
        let last = frozen.next().await;
        assert!(last.is_err(), "the last piece is withheld: {last:?}");
    }
}
