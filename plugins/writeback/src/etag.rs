//! A PUT's ETag (the quoted MD5 of its body, as S3 answers), hashed on a blocking thread of
//! its own while the body is still arriving and being encoded: MD5 runs at ~0.8 GB/s on one
//! core, the largest cost of staging a write, and it need not be on the request's path
//! (measured in load/PERFORMANCE.md, "Write-back").

use bytes::Bytes;
use md5::{Digest, Md5};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Pieces queued before [`Etag::update`] waits for the hasher: bounds the memory a slow
/// hasher can hold (pieces are the body's frames, tens of KiB each).
const QUEUE: usize = 64;

/// An MD5 of a body, fed piece by piece.
pub struct Etag {
    tx: Option<mpsc::Sender<Bytes>>,
    hasher: JoinHandle<String>,
}

impl Etag {
    /// Starts a hasher.
    pub fn start() -> Self {
        let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
        let hasher = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(piece) = rx.blocking_recv() {
                md5.update(&piece);
            }
            format!("\"{}\"", hex::encode(md5.finalize()))
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

    /// The quoted MD5 of every piece added; an error when the hasher died.
    pub async fn finish(mut self) -> Result<String, tokio::task::JoinError> {
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
        let mut e = Etag::start();
        e.update(Bytes::from_static(b"hello ")).await;
        e.update(Bytes::from_static(b"world")).await;
        let got = e.finish().await.ok();
        // md5("hello world")
        assert_eq!(got.as_deref(), Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\""));
        assert_eq!(
            Etag::start().finish().await.ok().as_deref(),
            Some("\"d41d8cd98f00b204e9800998ecf8427e\"")
        );
    }
}
