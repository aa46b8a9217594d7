//! Framed bodies as streams: [`Unframed`] hands on the checked data of a framed body read from
//! a connection (the asker's answer over Pingora, the owner's request over hyper), each piece
//! within the gap timeout; [`sealed`] frames a [`Payload`] for sending.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::Payload;
use floe_core::{ByteStream, OriginError};

use crate::frames::{Opener, Sealer};

/// Where a framed body's pieces come from.
#[async_trait]
pub(crate) trait Pieces: Send {
    /// The next piece as it arrived; `None` at the end of the connection's body.
    async fn piece(&mut self) -> Result<Option<Bytes>, String>;

    /// The body's end frame was checked: release the connection (default nothing).
    async fn done(&mut self) {}
}

/// The checked data of a framed body of `left` bytes.
pub(crate) struct Unframed<P> {
    pub pieces: P,
    pub opener: Opener,
    pub left: u64,
    pub gap: Duration,
    pub finished: bool,
}

fn cut(why: impl std::fmt::Display) -> OriginError {
    OriginError::Transport(format!("peer body: {why}"))
}

#[async_trait]
impl<P: Pieces> ByteStream for Unframed<P> {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        loop {
            if let Some(b) = self.opener.next_ready() {
                let n = b.len() as u64;
                if n > self.left {
                    return Err(cut("longer than it said"));
                }
                self.left -= n;
                return Ok(Some(b));
            }
            if self.opener.is_done() {
                if self.left != 0 {
                    return Err(cut(format!("ended {} bytes short", self.left)));
                }
                if !self.finished {
                    self.finished = true;
                    self.pieces.done().await;
                }
                return Ok(None);
            }
            let piece = tokio::time::timeout(self.gap, self.pieces.piece())
                .await
                .map_err(|_| cut("stalled"))?
                .map_err(cut)?;
            match piece {
                Some(b) => self.opener.push(b).map_err(cut)?,
                None => {
                    self.opener.finish().map_err(cut)?;
                }
            }
        }
    }
}

/// The next framed pieces of `payload` (after `sent` of its bytes went): its next piece's
/// frames, the end frame after its last, `None` once that went. A payload longer or shorter
/// than it said is an error (the body is then cut, never ended).
pub(crate) async fn sealed(
    payload: &mut Box<dyn ByteStream>,
    sealer: &mut Sealer,
    (len, sent): (u64, &mut u64),
    ended: &mut bool,
) -> Result<Option<Vec<Bytes>>, String> {
    if *ended {
        return Ok(None);
    }
    match payload.next().await.map_err(|e| e.to_string())? {
        Some(b) => {
            *sent += b.len() as u64;
            if *sent > len {
                return Err(format!("a body longer than its {len} bytes"));
            }
            Ok(Some(sealer.seal(b)))
        }
        None if *sent == len => {
            *ended = true;
            Ok(Some(vec![sealer.end()]))
        }
        None => Err(format!("a body of {sent} bytes where {len} were said")),
    }
}

/// Splits a payload into its length and stream.
pub(crate) fn parts(p: Payload) -> (u64, Box<dyn ByteStream>) {
    (p.len(), p.into_stream())
}
