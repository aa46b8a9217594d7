//! Cut-through: the reader that starts a fill serves its client from the fill's body as it
//! arrives, instead of waiting for each block piece to complete (store-and-forward would add
//! one piece's transfer time to every cold read).

use async_trait::async_trait;
use bytes::{Buf, Bytes};
use tokio::sync::{mpsc, watch};

use crate::inflight::{self, FillError, Slot};

/// Why a response could not be served to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeError {
    /// A fill failed (the object changed, or the origin failed).
    Fill(FillError),
    /// The sink (the client connection) refused the bytes.
    Sink(String),
}

impl From<FillError> for ServeError {
    fn from(e: FillError) -> Self {
        ServeError::Fill(e)
    }
}

/// Where a reader puts a response's bytes, in order.
///
/// Contract: `put` is called with consecutive pieces of the response and never with an empty
/// piece; an error stops the response.
#[async_trait]
pub trait Sink: Send {
    /// Takes the next bytes of the response.
    async fn put(&mut self, bytes: Bytes) -> Result<(), ServeError>;
}

/// The body of a fill this reader started, from object offset `pos` on.
pub(crate) struct Tap {
    rx: mpsc::UnboundedReceiver<Bytes>,
    pos: u64,
    head: Bytes,
    /// The first block's fill result: where the reason of an early end is published.
    result: watch::Receiver<Slot>,
    /// Object offset where the run's body ends.
    pub(crate) end: u64,
}

impl Tap {
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<Bytes>,
        start: u64,
        end: u64,
        result: watch::Receiver<Slot>,
    ) -> Self {
        Self {
            rx,
            pos: start,
            head: Bytes::new(),
            result,
            end,
        }
    }

    /// Whether object bytes `from..` are still ahead in this tap.
    pub(crate) fn ahead(&self, from: u64) -> bool {
        self.pos <= from && from < self.end
    }

    /// Puts object bytes `from..to` into `sink` as they arrive (bytes before `from` are
    /// skipped).
    pub(crate) async fn copy(
        &mut self,
        from: u64,
        to: u64,
        sink: &mut dyn Sink,
    ) -> Result<(), ServeError> {
        while self.pos < to {
            if self.head.is_empty() {
                match self.rx.recv().await {
                    Some(c) => self.head = c,
                    None => return Err(self.ended_early().await),
                }
            }
            let n = self.head.len() as u64;
            if self.pos < from {
                let skip = (from - self.pos).min(n);
                self.head.advance(skip as usize);
                self.pos += skip;
                continue;
            }
            let take = (to - self.pos).min(n);
            let piece = self.head.split_to(take as usize);
            self.pos += take;
            sink.put(piece).await?;
        }
        Ok(())
    }

    async fn ended_early(&mut self) -> ServeError {
        match inflight::wait(self.result.clone()).await {
            Err(e) => ServeError::Fill(e),
            Ok(_) => ServeError::Fill(FillError::Failed("fill body ended early".into())),
        }
    }
}
