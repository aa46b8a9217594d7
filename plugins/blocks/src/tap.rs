//! Cut-through: the reader that starts a fill serves its client from the fill's body as it
//! arrives, instead of waiting for each block piece to complete (store-and-forward would add
//! one piece's transfer time to every cold read).

use async_trait::async_trait;
use bytes::{Buf, Bytes, BytesMut};
use tokio::sync::{mpsc, watch};

use crate::inflight::{self, FillError, Slot};

/// Pieces smaller than this are joined with what is already waiting before a client write.
const COALESCE: u64 = 256 << 10;

/// Why a response could not be served to the end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServeError {
    /// A fill failed (the object changed, or the origin failed).
    #[error("fill: {0}")]
    Fill(FillError),
    /// The sink (the client connection) refused the bytes.
    #[error("client: {0}")]
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
            let mut piece = self.head.split_to(take as usize);
            self.pos += take;
            if (piece.len() as u64) < COALESCE && self.pos < to {
                piece = self.coalesce(piece, to);
            }
            sink.put(piece).await?;
        }
        Ok(())
    }

    /// Joins the small pieces already waiting in the channel to `piece` (up to `COALESCE`
    /// bytes, not past `to`): one client write instead of many, and no wait for more.
    fn coalesce(&mut self, piece: Bytes, to: u64) -> Bytes {
        let mut buf: Option<BytesMut> = None;
        while self.pos < to && buf.as_ref().map_or(piece.len(), |b| b.len()) < COALESCE as usize {
            let Ok(mut c) = self.rx.try_recv() else { break };
            let take = ((to - self.pos) as usize).min(c.len());
            let b = buf.get_or_insert_with(|| {
                let mut b = BytesMut::with_capacity(COALESCE as usize);
                b.extend_from_slice(&piece);
                b
            });
            b.extend_from_slice(&c.split_to(take));
            self.pos += take as u64;
            self.head = c;
            if !self.head.is_empty() {
                break;
            }
        }
        buf.map_or(piece, BytesMut::freeze)
    }

    /// Waits for the fill's first bytes (kept for `copy`): by then the origin (or owner) has
    /// answered for this version.
    pub(crate) async fn first(&mut self) -> Result<(), ServeError> {
        if self.head.is_empty() {
            match self.rx.recv().await {
                Some(c) => self.head = c,
                None => return Err(self.ended_early().await),
            }
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
