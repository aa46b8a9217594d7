//! A PUT's ETag (the quoted MD5 of its body, as S3 answers), and the checksum its client
//! named in an `x-amz-checksum-*` header if any, hashed on a blocking thread of its own while the body is still arriving and being encoded: MD5 runs at ~0.8 GB/s on one
//! core, the largest cost of staging a write, and it need not be on the request's path
//! (measured in load/PERFORMANCE.md, "Write-back").

use bytes::Bytes;
use floe_core::checksum::Checksum;
use md5::{Digest, Md5};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
}
