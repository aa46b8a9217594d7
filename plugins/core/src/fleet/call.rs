//! What moves between members: a request to a mounted service and its answer, each with a body
//! streamed piece by piece ([`Payload`]), and the small whole-body forms ([`PeerCall`],
//! [`PeerReply`]) most control calls use.

use async_trait::async_trait;
use bytes::Bytes;

use crate::{ByteStream, OriginError};

/// Largest whole answer [`crate::fleet::Transport::call`] and [`PeerService::call`] buffer:
/// 32 MiB. Streamed bodies ([`Payload`]) have no bound.
pub const PEER_CALL_MAX_BYTES: usize = 32 << 20;

/// A body between members: exactly [`Payload::len`] bytes, read piece by piece. A piece is
/// handed on only once the transport authenticated it; a body cut short, or one whose piece
/// fails its check, ends in an error.
pub struct Payload {
    len: u64,
    whole: Option<Bytes>,
    stream: Box<dyn ByteStream>,
}

/// The stream of a body held whole.
struct Whole(Option<Bytes>);

#[async_trait]
impl ByteStream for Whole {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        Ok(self.0.take().filter(|b| !b.is_empty()))
    }
}

impl Payload {
    /// A body of `len` bytes read from `stream` (which must yield exactly that many).
    pub fn streamed(len: u64, stream: Box<dyn ByteStream>) -> Self {
        Self {
            len,
            whole: None,
            stream,
        }
    }

    /// A body held whole.
    pub fn bytes(body: Bytes) -> Self {
        Self {
            len: body.len() as u64,
            whole: Some(body.clone()),
            stream: Box::new(Whole(Some(body))),
        }
    }

    /// The body, when it is held whole (it can then be sent again).
    pub fn whole(&self) -> Option<&Bytes> {
        self.whole.as_ref()
    }

    /// No body.
    pub fn empty() -> Self {
        Self::bytes(Bytes::new())
    }

    /// Its length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stream of its pieces.
    pub fn into_stream(self) -> Box<dyn ByteStream> {
        self.stream
    }

    /// The whole body; `Unavailable` when it is longer than `max` or fails on the way.
    pub async fn collect(mut self, max: usize) -> Result<Bytes, PeerError> {
        if self.len > max as u64 {
            return Err(PeerError::Unavailable(format!(
                "a body of {} bytes, above {max}",
                self.len
            )));
        }
        if let Some(b) = self.whole.take() {
            return Ok(b);
        }
        let mut whole = Vec::with_capacity(self.len as usize);
        while let Some(piece) = self
            .stream
            .next()
            .await
            .map_err(|e| PeerError::Unavailable(e.to_string()))?
        {
            whole.extend_from_slice(&piece);
            if whole.len() as u64 > self.len {
                return Err(PeerError::Unavailable("a body longer than it said".into()));
            }
        }
        if whole.len() as u64 != self.len {
            return Err(PeerError::Unavailable("a body shorter than it said".into()));
        }
        Ok(Bytes::from(whole))
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len)
    }
}

/// A request one plugin sends to its own kind on another node, its body streamed.
#[derive(Debug)]
pub struct PeerRequest {
    /// `GET`, `PUT`, `POST` or `DELETE`.
    pub method: &'static str,
    /// Path and query below the service, e.g. `/blocks?key=..`.
    pub path: String,
    /// The body.
    pub body: Payload,
}

/// A service's answer to a [`PeerRequest`].
#[derive(Debug)]
pub struct PeerResponse {
    /// HTTP status.
    pub status: u16,
    /// A short word the service tells its caller beside the body (e.g. how an owner got the
    /// bytes); authenticated with the answer. Empty when none.
    pub note: String,
    /// The node that answered (set by the transport).
    pub node: std::sync::Arc<str>,
    /// The body.
    pub body: Payload,
}

impl PeerResponse {
    /// An answer with a whole body.
    pub fn whole(status: u16, body: Bytes) -> Self {
        Self {
            status,
            note: String::new(),
            node: std::sync::Arc::from(""),
            body: Payload::bytes(body),
        }
    }

    /// The whole answer, at most `max` bytes of body.
    pub async fn into_reply(self, max: usize) -> Result<PeerReply, PeerError> {
        Ok(PeerReply {
            status: self.status,
            body: self.body.collect(max).await?,
        })
    }
}

/// A small request with its whole body (see [`PeerRequest`]).
#[derive(Debug, Clone)]
pub struct PeerCall {
    /// `GET`, `PUT`, `POST` or `DELETE`.
    pub method: &'static str,
    /// Path and query below the service, e.g. `/frag?id=..&idx=2`.
    pub path: String,
    /// The body.
    pub body: Bytes,
}

impl From<PeerCall> for PeerRequest {
    fn from(call: PeerCall) -> Self {
        Self {
            method: call.method,
            path: call.path,
            body: Payload::bytes(call.body),
        }
    }
}

/// A service's whole answer to a [`PeerCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerReply {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// A plugin's endpoints on the peer API (see [`crate::fleet::Transport::mount`]).
///
/// Contract: the transport authenticated the caller as a fleet member (and authenticates each
/// piece of the body as it is read); neither method may block the async thread. A service
/// implements [`PeerService::open`] for the calls whose bodies it streams, and
/// [`PeerService::call`] for the rest.
#[async_trait]
pub trait PeerService: Send + Sync {
    /// Answers one small call. Default: 404.
    async fn call(&self, _call: PeerCall) -> PeerReply {
        PeerReply {
            status: 404,
            body: Bytes::from_static(b"no such call"),
        }
    }

    /// Answers one request. Default: its body read whole (at most [`PEER_CALL_MAX_BYTES`])
    /// and passed to [`PeerService::call`].
    async fn open(&self, request: PeerRequest) -> PeerResponse {
        let body = match request.body.collect(PEER_CALL_MAX_BYTES).await {
            Ok(b) => b,
            Err(e) => return PeerResponse::whole(400, Bytes::from(e.to_string())),
        };
        let reply = self
            .call(PeerCall {
                method: request.method,
                path: request.path,
                body,
            })
            .await;
        PeerResponse::whole(reply.status, reply.body)
    }
}

/// Why a peer could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The owner cannot honour that ETag (the origin has another version): re-resolve.
    #[error("the owner has another version")]
    Conflict,
    /// The object does not exist.
    #[error("no such object")]
    NotFound,
    /// The owner uses another block size, or refused the ask as malformed.
    #[error("the owner refused the ask: {0}")]
    Refused(String),
    /// The owner has too many fills in flight: the next rendezvous choice serves.
    #[error("the owner is busy")]
    Busy,
    /// Down, slow, cut off, or any other transport or server fault: the asker goes to the
    /// origin itself.
    #[error("peer unavailable: {0}")]
    Unavailable(String),
}

impl PeerError {
    /// The peer API status for this error.
    pub fn status(&self) -> u16 {
        match self {
            PeerError::Conflict => 412,
            PeerError::NotFound => 404,
            PeerError::Refused(_) => 400,
            PeerError::Busy => 429,
            PeerError::Unavailable(_) => 503,
        }
    }

    /// The error a service's answer `status` means (`None` for a success).
    pub fn of_status(status: u16) -> Option<Self> {
        match status {
            200..=299 => None,
            412 => Some(PeerError::Conflict),
            429 => Some(PeerError::Busy),
            404 => Some(PeerError::NotFound),
            400 => Some(PeerError::Refused("bad ask".into())),
            s => Some(PeerError::Unavailable(format!("peer answered {s}"))),
        }
    }

    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            PeerError::Conflict => "conflict",
            PeerError::NotFound => "not_found",
            PeerError::Refused(_) => "refused",
            PeerError::Busy => "busy",
            PeerError::Unavailable(_) => "unavailable",
        }
    }
}
