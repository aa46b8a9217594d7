//! A scripted origin: objects in memory, ETag the MD5 as S3's for a single PUT, `Content-MD5`
//! checked as S3 checks it; it can be cut (every call fails) or made to lose the answer of
//! the next PUTs after storing them (the connection died on the way back).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use floe_core::{
    BucketName, ByteStream, ETag, Fetched, ObjectHead, ObjectKey, OriginError, OriginReader,
};
use md5::{Digest, Md5};

/// An object as the origin holds it.
#[derive(Debug, Clone)]
struct Stored {
    body: Bytes,
    etag: String,
    modified_ms: u64,
}

/// The origin of the test bed's one bucket.
#[derive(Default)]
pub struct MemOrigin {
    objects: Mutex<HashMap<String, Stored>>,
    /// Every call fails while set.
    pub cut: AtomicBool,
    /// PUTs still to store whose answer is lost.
    pub lose_answers: AtomicU32,
    /// The next PUT takes this long (ms) between reading its body and storing it: a slow link.
    pub slow_next_put_ms: std::sync::atomic::AtomicU64,
    /// PUTs reading or storing their body now.
    pub puts_in_flight: AtomicU32,
}

/// A whole body as one piece.
struct Whole(Option<Bytes>);

#[async_trait]
impl ByteStream for Whole {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        Ok(self.0.take())
    }
}

impl MemOrigin {
    /// The body `key` holds now.
    pub fn body(&self, key: &str) -> Option<Bytes> {
        self.objects
            .lock()
            .unwrap()
            .get(key)
            .map(|s| s.body.clone())
    }

    /// The ETag of what `key` holds now.
    pub fn etag(&self, key: &str) -> Option<String> {
        self.objects
            .lock()
            .unwrap()
            .get(key)
            .map(|s| s.etag.clone())
    }

    /// Stores `body` as `key` (a PUT that the proxy forwarded itself).
    pub fn store(&self, key: &str, body: Bytes) -> Result<String, OriginError> {
        let etag = format!("\"{}\"", hex::encode(Md5::digest(&body)));
        self.store_as(key, body, etag)
    }

    /// Stores `body` as `key` with the ETag `etag`.
    fn store_as(&self, key: &str, body: Bytes, etag: String) -> Result<String, OriginError> {
        self.check()?;
        let modified_ms = crate::journal::now_ms();
        let s = Stored {
            body,
            etag: etag.clone(),
            modified_ms,
        };
        self.objects.lock().unwrap().insert(key.to_owned(), s);
        Ok(etag)
    }

    /// Deletes `key` (a DELETE the proxy forwarded).
    pub fn delete(&self, key: &str) -> Result<(), OriginError> {
        self.check()?;
        self.objects.lock().unwrap().remove(key);
        Ok(())
    }

    /// Fails a PUT that was stored when its answer is to be lost (see `lose_answers`).
    fn answer_lost(&self) -> Result<(), OriginError> {
        let lost = self
            .lose_answers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match lost {
            Ok(_) => Err(OriginError::Transport("the answer was lost".into())),
            Err(_) => Ok(()),
        }
    }

    fn check(&self) -> Result<(), OriginError> {
        match self.cut.load(Ordering::SeqCst) {
            true => Err(OriginError::Transport("the origin is cut off".into())),
            false => Ok(()),
        }
    }

    fn stored(&self, key: &ObjectKey) -> Result<Option<Stored>, OriginError> {
        self.check()?;
        Ok(self.objects.lock().unwrap().get(key.as_str()).cloned())
    }
}

fn head_of(s: &Stored) -> ObjectHead {
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(s.modified_ms);
    ObjectHead {
        etag: ETag::parse(&s.etag).unwrap(),
        size: s.body.len() as u64,
        headers: vec![("last-modified".into(), httpdate::fmt_http_date(when))],
        checksums: None,
    }
}

#[async_trait]
impl OriginReader for MemOrigin {
    async fn head(
        &self,
        _: &BucketName,
        key: &ObjectKey,
        _: Option<&ETag>,
    ) -> Result<Option<ObjectHead>, OriginError> {
        Ok(self.stored(key)?.as_ref().map(head_of))
    }

    async fn get_current(
        &self,
        _: &BucketName,
        key: &ObjectKey,
        _: Option<&str>,
    ) -> Result<Fetched, OriginError> {
        let s = self.stored(key)?.ok_or(OriginError::NotFound)?;
        Ok(Fetched {
            head: head_of(&s),
            first: 0,
            last: (s.body.len() as u64).saturating_sub(1),
            body: Box::new(Whole(Some(s.body))),
        })
    }

    async fn put(
        &self,
        _: &BucketName,
        key: &ObjectKey,
        len: u64,
        headers: &[(String, String)],
        mut body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        self.check()?;
        self.puts_in_flight.fetch_add(1, Ordering::SeqCst);
        let mut all = BytesMut::new();
        while let Some(piece) = body.next().await? {
            all.extend_from_slice(&piece);
        }
        let all = all.freeze();
        let slow = self.slow_next_put_ms.swap(0, Ordering::SeqCst);
        if slow > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(slow)).await;
        }
        self.puts_in_flight.fetch_sub(1, Ordering::SeqCst);
        let md5 = Md5::digest(&all);
        let sent = headers.iter().find(|(n, _)| n == "content-md5");
        let b64 = base64::engine::general_purpose::STANDARD.encode(md5);
        if all.len() as u64 != len || sent.is_some_and(|(_, v)| *v != b64) {
            return Err(OriginError::Status(400));
        }
        let etag = self.store(key.as_str(), all)?;
        self.answer_lost()?;
        ETag::parse(&etag).map_err(|e| OriginError::Transport(e.to_string()))
    }

    /// As S3: each part checked against its `Content-MD5`, the ETag the MD5 of the parts' MD5s
    /// and their count.
    async fn put_parts(
        &self,
        _: &BucketName,
        key: &ObjectKey,
        _: &[(String, String)],
        parts: &[floe_core::PartSpan],
        mut body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        self.check()?;
        let mut all = BytesMut::new();
        while let Some(piece) = body.next().await? {
            all.extend_from_slice(&piece);
        }
        let (mut at, mut etags) = (0usize, Vec::new());
        for p in parts {
            let end = at + p.len as usize;
            let part = all.get(at..end).ok_or(OriginError::Status(400))?;
            if Md5::digest(part)[..] != p.md5[..] {
                return Err(OriginError::Status(400));
            }
            etags.push(format!("\"{}\"", hex::encode(p.md5)));
            at = end;
        }
        if at != all.len() {
            return Err(OriginError::Status(400));
        }
        let etag = crate::etag::multipart(etags.iter().map(String::as_str))
            .ok_or(OriginError::Status(400))?;
        let etag = self.store_as(key.as_str(), all.freeze(), etag)?;
        self.answer_lost()?;
        ETag::parse(&etag).map_err(|e| OriginError::Transport(e.to_string()))
    }

    async fn get_range(
        &self,
        _: &BucketName,
        key: &ObjectKey,
        etag: &ETag,
        first: u64,
        last: u64,
    ) -> Result<Box<dyn ByteStream>, OriginError> {
        let s = self.stored(key)?.ok_or(OriginError::NotFound)?;
        if s.etag != etag.as_str() {
            return Err(OriginError::Changed);
        }
        let end = (last + 1).min(s.body.len() as u64) as usize;
        Ok(Box::new(Whole(Some(s.body.slice(first as usize..end)))))
    }
}
