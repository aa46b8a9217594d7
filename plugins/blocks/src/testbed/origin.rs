//! An in-memory [`OriginReader`] for deterministic tests of the block cache: versions with
//! their own ETags, a scripted latency before each answer and between body pieces (under
//! `tokio::test(start_paused = true)` these cost no wall time), scripted faults, and counters
//! of every request and byte the cache asked for.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{
    BucketName, ByteStream, ETag, Fetched, ObjectHead, ObjectKey, OriginError, OriginReader,
};
use tokio::sync::Notify;

use crate::range::{resolve, RangeAsk};

/// When version `n` (ETag `"vn"`) was written: the bed's clock starts at 2026-12-01 12:00:00
/// GMT and each version is one second younger than the one before.
pub fn last_modified(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_126_400 + n)
}

/// What the next GET answers instead of the truth.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The request fails with this error before any body.
    Fail(OriginError),
    /// The body ends with a transport error after this many bytes.
    Short(usize),
    /// The body stops after this many bytes, notifies `reached`, and goes on once `release`
    /// is notified (to change the object while a fill is under way).
    Hold {
        after: usize,
        reached: Arc<Notify>,
        release: Arc<Notify>,
    },
}

/// The scripted origin.
pub struct MemOrigin {
    objects: Mutex<HashMap<String, (ETag, Bytes)>>,
    faults: Mutex<VecDeque<Fault>>,
    versions: AtomicU64,
    /// Time before each answer's header.
    pub latency: Duration,
    /// Size of each body piece.
    pub piece: usize,
    /// Time before each body piece.
    pub piece_delay: Duration,
    /// Notified as each GET arrives (before its latency): by then the reader that sent it has
    /// claimed the blocks it fills.
    pub get_started: Arc<Notify>,
    /// HEADs received.
    pub heads: AtomicU64,
    /// GETs received (resolving and ranged).
    pub gets: AtomicU64,
    /// Body bytes sent.
    pub bytes: Arc<AtomicU64>,
    /// Writes "staged on this node" (write-back's): what `local_head` answers.
    pub staged: Mutex<HashMap<String, ObjectHead>>,
}

impl Default for MemOrigin {
    fn default() -> Self {
        Self {
            objects: Mutex::default(),
            faults: Mutex::default(),
            versions: AtomicU64::new(0),
            latency: Duration::from_millis(30),
            piece: 16 << 10,
            piece_delay: Duration::from_millis(1),
            get_started: Arc::default(),
            heads: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            bytes: Arc::default(),
            staged: Mutex::default(),
        }
    }
}

impl MemOrigin {
    /// Stores a new version of `key`; returns its ETag.
    pub fn put(&self, key: &str, body: impl Into<Bytes>) -> ETag {
        let n = self.versions.fetch_add(1, Ordering::Relaxed) + 1;
        let etag = ETag::parse(&format!("\"v{n}\"")).unwrap();
        if let Ok(mut o) = self.objects.lock() {
            o.insert(key.to_owned(), (etag.clone(), body.into()));
        }
        etag
    }

    /// Stages `body` as `key`'s version on this node (not at the origin); returns its ETag.
    pub fn stage(&self, key: &str, body: &[u8]) -> ETag {
        let etag = ETag::parse("\"staged\"").unwrap();
        let head = Self::head_of(&etag, &Bytes::copy_from_slice(body));
        if let Ok(mut s) = self.staged.lock() {
            s.insert(key.to_owned(), head);
        }
        etag
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &str) {
        if let Ok(mut o) = self.objects.lock() {
            o.remove(key);
        }
    }

    /// Scripts the next GET's fault (faults apply in order, one per GET).
    pub fn fault(&self, f: Fault) {
        if let Ok(mut q) = self.faults.lock() {
            q.push_back(f);
        }
    }

    /// (HEADs, GETs, body bytes) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.heads.load(Ordering::Relaxed),
            self.gets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    fn current(&self, key: &ObjectKey) -> Result<(ETag, Bytes), OriginError> {
        let o = self
            .objects
            .lock()
            .map_err(|_| OriginError::Transport("poisoned".into()))?;
        o.get(key.as_str()).cloned().ok_or(OriginError::NotFound)
    }

    fn head_of(etag: &ETag, body: &Bytes) -> ObjectHead {
        let n = etag.as_str().trim_matches('"').trim_start_matches('v');
        let modified = last_modified(n.parse().unwrap_or(0));
        ObjectHead {
            etag: etag.clone(),
            size: body.len() as u64,
            headers: vec![
                ("content-type".into(), "application/octet-stream".into()),
                ("last-modified".into(), httpdate::fmt_http_date(modified)),
            ],
            checksums: None,
        }
    }

    /// Counts a GET, waits the latency and applies the next fault, if any.
    async fn start_get(&self) -> Result<Option<Fault>, OriginError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.get_started.notify_one();
        tokio::time::sleep(self.latency).await;
        let fault = self.faults.lock().ok().and_then(|mut q| q.pop_front());
        match fault {
            Some(Fault::Fail(e)) => Err(e),
            other => Ok(other),
        }
    }

    fn body(&self, bytes: Bytes, fault: Option<Fault>) -> Box<dyn ByteStream> {
        Box::new(MemBody {
            rest: bytes,
            sent: 0,
            fault,
            piece: self.piece,
            delay: self.piece_delay,
            counter: self.bytes.clone(),
        })
    }
}

/// A body sent piece by piece, each after `delay`, subject to a scripted fault.
struct MemBody {
    rest: Bytes,
    sent: usize,
    fault: Option<Fault>,
    piece: usize,
    delay: Duration,
    counter: Arc<AtomicU64>,
}

#[async_trait]
impl ByteStream for MemBody {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        tokio::time::sleep(self.delay).await;
        let mut n = self.piece.min(self.rest.len());
        match &self.fault {
            Some(Fault::Short(limit)) => {
                if self.sent >= *limit {
                    return Err(OriginError::Transport("connection reset mid-body".into()));
                }
                n = n.min(limit - self.sent);
            }
            Some(Fault::Hold {
                after,
                reached,
                release,
            }) => {
                if self.sent >= *after {
                    reached.notify_one();
                    release.notified().await;
                    self.fault = None;
                } else {
                    n = n.min(after - self.sent);
                }
            }
            _ => {}
        }
        self.sent += n;
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(Some(self.rest.split_to(n)))
    }
}

#[async_trait]
impl OriginReader for MemOrigin {
    fn local_head(&self, _bucket: &BucketName, key: &ObjectKey) -> Option<ObjectHead> {
        self.staged.lock().ok()?.get(key.as_str()).cloned()
    }

    async fn head(
        &self,
        _bucket: &BucketName,
        key: &ObjectKey,
        if_none_match: Option<&ETag>,
    ) -> Result<Option<ObjectHead>, OriginError> {
        self.heads.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.latency).await;
        let (etag, body) = self.current(key)?;
        if if_none_match == Some(&etag) {
            return Ok(None);
        }
        Ok(Some(Self::head_of(&etag, &body)))
    }

    async fn get_current(
        &self,
        _bucket: &BucketName,
        key: &ObjectKey,
        range: Option<&str>,
    ) -> Result<Fetched, OriginError> {
        let fault = self.start_get().await?;
        let (etag, body) = self.current(key)?;
        let size = body.len() as u64;
        let (first, last) = match resolve(range, size) {
            RangeAsk::Whole if size == 0 => (0, 0),
            RangeAsk::Whole => (0, size - 1),
            RangeAsk::Part { first, last } => (first, last),
            RangeAsk::Unsatisfiable => return Err(OriginError::Status(416)),
            RangeAsk::Multi => return Err(OriginError::Status(400)),
        };
        let slice = if size == 0 {
            Bytes::new()
        } else {
            body.slice(first as usize..=last as usize)
        };
        Ok(Fetched {
            head: Self::head_of(&etag, &body),
            first,
            last,
            body: self.body(slice, fault),
        })
    }

    async fn get_range(
        &self,
        _bucket: &BucketName,
        key: &ObjectKey,
        etag: &ETag,
        first: u64,
        last: u64,
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        let fault = self.start_get().await?;
        let (now, body) = self.current(key)?;
        if &now != etag {
            return Err(OriginError::Changed);
        }
        if last as usize >= body.len() || first > last {
            return Err(OriginError::Status(416));
        }
        Ok(self.body(body.slice(first as usize..=last as usize), fault))
    }
}
