//! A PUT's ETag (the quoted MD5 of its body, as S3 answers), and the checksum its client
//! named in an `x-amz-checksum-*` header if any, hashed on a blocking thread of its own while the body is still arriving and being encoded: MD5 runs at ~0.8 GB/s on one
//! core, the largest cost of staging a write, and it need not be on the request's path
//! (measured in load/PERFORMANCE.md, "Write-back").

use bytes::Bytes;
use floe_core::checksum::Checksum;
use floe_core::S3Error;
use md5::{Digest, Md5};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::journal::Part;

/// Pieces queued before [`Etag::update`] waits for the hasher: bounds the memory a slow
/// hasher can hold (pieces are the body's frames, tens of KiB each).
const QUEUE: usize = 64;

/// What a body hashed to: its quoted hex MD5, and the base64 checksum asked for.
pub struct Hashed {
    /// The quoted MD5 (the ETag).
    pub etag: String,
    /// The checksum [`Etag::start`] was given, over the same bytes.
    pub checksum: Option<String>,
}

/// An MD5 (and maybe a checksum) of a body, fed piece by piece.
pub struct Etag {
    tx: Option<mpsc::Sender<Bytes>>,
    hasher: JoinHandle<Hashed>,
}

impl Etag {
    /// Starts a hasher; `checksum` runs beside the MD5 when the client sent one to check.
    pub fn start(mut checksum: Option<Checksum>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
        let hasher = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(piece) = rx.blocking_recv() {
                md5.update(&piece);
                if let Some(c) = checksum.as_mut() {
                    c.update(&piece);
                }
            }
            Hashed {
                etag: format!("\"{}\"", hex::encode(md5.finalize())),
                checksum: checksum.map(Checksum::finish_base64),
            }
        });
        Self {
            tx: Some(tx),
            hasher,
        }
    }

    /// Adds `piece` (a reference count, not a copy).
    pub async fn update(&mut self, piece: Bytes) {
        if let Some(tx) = &self.tx {
            if tx.send(piece).await.is_err() {
                self.tx = None; // the hasher is gone; `finish` reports it
            }
        }
    }

    /// What every piece added hashed to; an error when the hasher died.
    pub async fn finish(mut self) -> Result<Hashed, tokio::task::JoinError> {
        self.tx = None;
        (&mut self.hasher).await
    }
}

impl Drop for Etag {
    fn drop(&mut self) {
        self.hasher.abort(); // a blocking task runs on; its channel closing ends it
    }
}

/// The MD5 a quoted hex ETag names (`None`: not a plain MD5, e.g. a multipart ETag).
pub fn md5_of(etag: &str) -> Option<[u8; 16]> {
    let mut md5 = [0u8; 16];
    hex::decode_to_slice(etag.trim_matches('"'), &mut md5)
        .ok()
        .map(|()| md5)
}

/// S3's ETag of an object completed from parts with the quoted MD5 ETags `etags`: the MD5 of
/// their binary MD5s, a dash and their count, quoted. `None` if one is not an MD5.
pub fn multipart<'a>(etags: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut md5 = Md5::new();
    let mut count = 0;
    for etag in etags {
        md5.update(md5_of(etag)?);
        count += 1;
    }
    Some(format!("\"{}-{count}\"", hex::encode(md5.finalize())))
}

/// The ETag of a staged write whose body hashed to the quoted MD5 `md5`: that, for a
/// PutObject; S3's multipart ETag for a write completed from `parts` (which must add up to
/// its `size`).
pub fn of_write(md5: String, parts: &[Part], size: u64) -> Result<String, S3Error> {
    if parts.is_empty() {
        return Ok(md5);
    }
    let internal = |why: &str| S3Error::internal(why);
    if parts.iter().map(|p| p.size).sum::<u64>() != size {
        return Err(internal("the parts do not add up to the completed object"));
    }
    multipart(parts.iter().map(|p| p.etag.as_str()))
        .ok_or_else(|| internal("a part's ETag is not an MD5"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_etag_is_the_quoted_md5_of_the_pieces_in_order() {
        let mut e = Etag::start(Checksum::for_header("x-amz-checksum-crc32"));
        e.update(Bytes::from_static(b"hello ")).await;
        e.update(Bytes::from_static(b"world")).await;
        let got = e.finish().await.ok();
        // md5("hello world"); crc32("hello world") = 0x0d4a1185
        let etag = got.as_ref().map(|h| h.etag.as_str());
        assert_eq!(etag, Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\""));
        let crc = got.and_then(|h| h.checksum);
        assert_eq!(crc.as_deref(), Some("DUoRhQ=="));
        let empty = Etag::start(None).finish().await.ok();
        assert_eq!(
            empty.as_ref().map(|h| h.etag.as_str()),
            Some("\"d41d8cd98f00b204e9800998ecf8427e\"")
        );
        assert_eq!(empty.and_then(|h| h.checksum), None);
    }

    #[test]
    fn a_write_from_parts_has_s3s_multipart_etag() {
        let parts = [
            Part {
                size: 6,
                etag: "\"f814893777bcc2295fff05f00e508da6\"".into(), // md5("hello ")
            },
            Part {
                size: 5,
                etag: "\"7d793037a0760186574b0282f2f435e7\"".into(), // md5("world")
            },
        ];
        let whole = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"".to_owned();
        let got = of_write(whole.clone(), &parts, 11).ok();
        assert_eq!(
            got.as_deref(),
            Some("\"e09e4fd6265b36115fe3db32df945d84-2\"")
        );
        assert_eq!(of_write(whole.clone(), &[], 11).ok(), Some(whole.clone()));
        assert!(
            of_write(whole.clone(), &parts, 12).is_err(),
            "parts that miss a byte"
        );
        let odd = [Part {
            size: 11,
            etag: "\"x-1\"".into(),
        }];
        assert!(
            of_write(whole, &odd, 11).is_err(),
            "a part ETag that is no MD5"
        );
    }
}
