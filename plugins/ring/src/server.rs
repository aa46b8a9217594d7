//! The answering side of the peer API: its own listener (hyper, HTTP/1.1 keep-alive), every
//! request's head authenticated with the fleet secret and every piece of every body checked
//! ([`crate::frames`]), answered by the service a plugin mounted under its name. Served until
//! the process exits, so a draining node stays a donor through its grace period.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{Payload, PeerError, PeerRequest, PeerResponse, PeerService};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::body::{parts, sealed, Pieces, Unframed};
use crate::frames::{Direction, Opener, Sealer};
use crate::metrics;
use crate::wire::{
    bodiless, body_len, kind_of, reply_tag, verify, ReplyHead, AUTH, LEN, NODE, NOTE, PREFIX, REPLY,
};

/// Longest a peer's TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Longest wait for the next piece of a request body.
const REQUEST_GAP: Duration = Duration::from_secs(30);

/// Mounted services by name (see `Transport::mount`).
pub type Services = Arc<RwLock<HashMap<String, Arc<dyn PeerService>>>>;

/// What the listener needs.
pub struct PeerApi {
    /// This node's id.
    pub node: Arc<str>,
    /// The fleet secret.
    pub secret: Arc<Vec<u8>>,
    /// The frame key derived from it.
    pub key: [u8; 32],
    /// The nonces of requests accepted lately (a captured request is refused a second time).
    pub seen: Arc<crate::wire::ReplayGuard>,
    /// Mounted services by name (`/v2/x/<name>/...`).
    pub services: Services,
}

/// A response body fed by a channel (framed pieces as they are sealed).
pub struct ChannelBody {
    rx: Option<mpsc::Receiver<Result<Bytes, std::io::Error>>>,
    once: Option<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(b) = self.once.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match self.rx.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.once, &self.rx) {
            (Some(b), None) => SizeHint::with_exact(b.len() as u64),
            _ => SizeHint::default(),
        }
    }
}

/// An answer this node cannot authenticate (the request was not a member's): a plain status.
fn plain(status: u16, body: &'static str) -> Response<ChannelBody> {
    let mut r = Response::new(ChannelBody {
        rx: None,
        once: Some(Bytes::from_static(body.as_bytes())),
    });
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    r
}

fn denied() -> Response<ChannelBody> {
    metrics::with(|m| m.served.with_label_values(&["any", "denied"]).inc());
    plain(403, "fleet authentication failed")
}

/// The request body, as the connection brings it.
struct IncomingPieces(Incoming);

#[async_trait]
impl Pieces for IncomingPieces {
    async fn piece(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            match http_body_util::BodyExt::frame(&mut self.0).await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// Reads the HTTP body's own end (the last chunk follows the end frame): a connection
    /// closed with request bytes unread is reset, cutting the answer still on its way.
    async fn done(&mut self) {
        let rest = async { while let Ok(Some(_)) = self.piece().await {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), rest).await;
    }
}

fn method_of(m: &http::Method) -> Option<&'static str> {
    match m.as_str() {
        "GET" => Some("GET"),
        "PUT" => Some("PUT"),
        "POST" => Some("POST"),
        "DELETE" => Some("DELETE"),
        _ => None,
    }
}

impl PeerApi {
    async fn handle(&self, req: Request<Incoming>) -> Response<ChannelBody> {
        let path = req
            .uri()
            .path_and_query()
            .map_or(String::new(), |p| p.as_str().to_owned());
        let Some(rest) = path.strip_prefix(PREFIX) else {
            // A node of an earlier release: unavailable, so it goes to the origin.
            return plain(503, "this node speaks the v2 peer API");
        };
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
        };
        let (Some(method), Ok(len)) = (method_of(req.method()), header(LEN).parse::<u64>()) else {
            return denied();
        };
        let Some(nonce) = verify(
            &self.secret,
            (method, &path, &body_len(len)),
            header(AUTH),
            &self.seen,
        ) else {
            return denied();
        };
        let (name, below) = rest.split_once('/').unwrap_or((rest, ""));
        let kind = kind_of(below);
        let svc = self.services.read().ok().and_then(|s| s.get(name).cloned());
        let Some(svc) = svc else {
            // Not mounted (yet: a node starting up): a 404 would read as the service's own.
            metrics::with(|m| m.served.with_label_values(&[kind, "unavailable"]).inc());
            return plain(503, "no such service here");
        };
        let mut body = Unframed {
            pieces: IncomingPieces(req.into_body()),
            opener: Opener::new(self.key, nonce, Direction::Request),
            left: len,
            gap: REQUEST_GAP,
            finished: false,
        };
        let body = if len == 0 {
            // Read (and check) the end frame of an empty body here: a service that never reads
            // it would leave the connection unfit to keep.
            if floe_core::ByteStream::next(&mut body).await.is_err() {
                return denied();
            }
            Payload::empty()
        } else {
            Payload::streamed(len, Box::new(body))
        };
        let request = PeerRequest {
            method,
            path: format!("/{below}"),
            body,
        };
        let answer = svc.open(request).await;
        let result = match PeerError::of_status(answer.status) {
            None if answer.note.is_empty() => "ok",
            None => answer.note.as_str(),
            Some(e) => e.label(),
        };
        metrics::with(|m| m.served.with_label_values(&[kind, result]).inc());
        self.respond(nonce, answer)
    }

    /// The framed, tagged answer.
    fn respond(&self, nonce: u128, answer: PeerResponse) -> Response<ChannelBody> {
        let PeerResponse {
            mut status,
            note,
            body,
            ..
        } = answer;
        if bodiless(status) && !body.is_empty() {
            tracing::warn!(
                status,
                "a peer service answered a bodiless status with a body"
            );
            status = 500;
        }
        let (len, mut payload) = parts(body);
        let head = ReplyHead {
            status,
            node: &self.node,
            note: &note,
            len,
        };
        let tag = reply_tag(&self.key, nonce, head);
        let (tx, rx) = mpsc::channel(4);
        let mut sealer = Sealer::new(self.key, nonce, Direction::Answer);
        let framed = !bodiless(status);
        tokio::spawn(async move {
            if !framed {
                return;
            }
            let (mut sent, mut ended) = (0u64, false);
            loop {
                match sealed(&mut payload, &mut sealer, (len, &mut sent), &mut ended).await {
                    Ok(Some(pieces)) => {
                        for p in pieces {
                            if tx.send(Ok(p)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        // Cutting the body (before its end frame) tells the asker to go to the
                        // origin.
                        let _ = tx.send(Err(std::io::Error::other(e))).await;
                        return;
                    }
                }
            }
        });
        let mut r = Response::new(ChannelBody {
            rx: Some(rx),
            once: None,
        });
        *r.status_mut() =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        let h = r.headers_mut();
        h.insert(LEN, len.into());
        for (name, value) in [(NODE, &*self.node), (NOTE, note.as_str()), (REPLY, &tag)] {
            if let Ok(v) = http::HeaderValue::from_str(value) {
                h.insert(name, v);
            }
        }
        r
    }
}

/// The peer listener: bound at start-up (a taken port fails the start), served until the
/// process exits.
pub struct PeerListener {
    /// The bound listener, taken by [`PeerListener::serve`].
    pub listener: std::sync::Mutex<Option<TcpListener>>,
    /// The API.
    pub api: Arc<PeerApi>,
    /// TLS, when `fleet.tls` is set.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Serves one connection's requests.
async fn serve_conn<I>(io: I, api: Arc<PeerApi>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let api = api.clone();
        // The asking node's span stays the parent of what this node fetches for it.
        let trace = req
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(floe_core::trace::TraceParent::passed_on);
        async move { Ok::<_, Infallible>(floe_core::trace::scope(trace, api.handle(req)).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), svc)
        .await
    {
        tracing::debug!(error = %e, "peer API connection ended");
    }
}

impl PeerListener {
    /// Whether the listener was bound and is being served.
    pub fn is_bound(&self) -> bool {
        self.listener.lock().is_ok_and(|l| l.is_none())
    }

    /// Accepts and serves connections (on the current runtime), for as long as it runs.
    pub async fn serve(&self) {
        let Some(listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else {
            return;
        };
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "peer API accept failed");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let api = self.api.clone();
            let tls = self.tls.clone();
            tokio::spawn(async move {
                let Some(acceptor) = tls else {
                    return serve_conn(stream, api).await;
                };
                let handshake = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await;
                match handshake {
                    Ok(Ok(s)) => serve_conn(s, api).await,
                    Ok(Err(e)) => tracing::debug!(error = %e, "peer TLS handshake failed"),
                    Err(_) => tracing::debug!("peer TLS handshake timed out"),
                }
            });
        }
    }
}
