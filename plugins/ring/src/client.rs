//! The asking side of the peer API, over Pingora's connector (pooled keep-alive connections,
//! as origin reads use). Every call is bounded: connecting, sending and the start of the answer
//! within the caller's wait, and each later piece of the answer's body within ten peer
//! timeouts, so a slow or dead peer costs the caller one timeout before it goes elsewhere. An
//! answer is handed on only when its head carries this request's reply tag, and its body only
//! frame by checked frame.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{Payload, Peer, PeerError, PeerRequest, PeerResponse};
use pingora::connectors::http::Connector;
use pingora::connectors::ConnectorOptions;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;

use crate::body::{parts, sealed, Pieces, Unframed};
use crate::frames::{Direction, Opener, Sealer};
use crate::metrics;
use crate::wire::{
    bodiless, body_len, kind_of, reply_holds, sign, ReplyHead, AUTH, LEN, NODE, NOTE, PREFIX, REPLY,
};

/// How long an idle pooled connection is kept: a peer may restart meanwhile, which the
/// retries below absorb.
const IDLE: Option<Duration> = Some(Duration::from_secs(30));
/// Tries of one call with a whole body on pooled connections that turn out closed (the last
/// on a fresh one when the pool holds fewer).
const STALE_RETRIES: u32 = 4;

/// Calls peers.
pub struct PeerClient {
    connector: Arc<Connector>,
    secret: Arc<Vec<u8>>,
    key: [u8; 32],
    timeout: Duration,
    tls: bool,
}

fn unavailable(e: impl std::fmt::Display) -> PeerError {
    PeerError::Unavailable(e.to_string())
}

/// A request about to go: its signed head and body.
struct Outgoing {
    head: RequestHeader,
    nonce: u128,
    body: Payload,
}

impl PeerClient {
    /// A client authenticating with `secret`, whose peers answer within `timeout`; over TLS
    /// trusting the CA in file `ca` when it is set.
    pub fn new(secret: Arc<Vec<u8>>, timeout: Duration, ca: Option<&str>) -> Self {
        let opts = ca.map(|ca| ConnectorOptions {
            ca_file: Some(ca.to_owned()),
            ..ConnectorOptions::new(128)
        });
        Self {
            connector: Arc::new(Connector::new(opts)),
            key: crate::frames::key(&secret),
            secret,
            timeout,
            tls: ca.is_some(),
        }
    }

    async fn resolve(addr: &str) -> Result<SocketAddr, PeerError> {
        if let Ok(a) = addr.parse() {
            return Ok(a);
        }
        tokio::net::lookup_host(addr)
            .await
            .map_err(unavailable)?
            .next()
            .ok_or_else(|| unavailable(format!("{addr} resolves to nothing")))
    }

    /// Sends `request` to the service `service` on `peer`; `Ok` once the answer's head came
    /// back authenticated, within `wait`.
    pub async fn open(
        &self,
        peer: &Peer,
        service: &str,
        request: PeerRequest,
        wait: Duration,
    ) -> Result<PeerResponse, PeerError> {
        let kind = kind_of(&request.path).to_owned();
        let started = Instant::now();
        let r = tokio::time::timeout(wait, self.open_inner(peer, service, request))
            .await
            .map_err(|_| unavailable(format!("{} did not answer in {wait:?}", peer.id)))
            .and_then(|r| r);
        record(&kind, &r, started);
        r
    }

    fn outgoing(
        &self,
        peer: &Peer,
        path: &str,
        request: PeerRequest,
    ) -> Result<Outgoing, PeerError> {
        let method = request.method;
        let len = request.body.len();
        let (auth, nonce) = sign(&self.secret, method, path, &body_len(len));
        let mut head = RequestHeader::build(method, path.as_bytes(), None).map_err(unavailable)?;
        head.insert_header(AUTH, auth).map_err(unavailable)?;
        head.insert_header(LEN, len.to_string())
            .map_err(unavailable)?;
        head.insert_header("transfer-encoding", "chunked")
            .map_err(unavailable)?;
        head.insert_header("host", &*peer.addr)
            .map_err(unavailable)?;
        if let Some(t) = floe_core::trace::current_header() {
            head.insert_header("traceparent", t).map_err(unavailable)?;
        }
        Ok(Outgoing {
            head,
            nonce,
            body: request.body,
        })
    }

    async fn open_inner(
        &self,
        peer: &Peer,
        service: &str,
        request: PeerRequest,
    ) -> Result<PeerResponse, PeerError> {
        let path = format!("{PREFIX}{service}{}", request.path);
        let out = self.outgoing(peer, &path, request)?;
        let addr = Self::resolve(&peer.addr).await?;
        // The certificate must name the host of the peer's address (an IP or a DNS name).
        let host = peer.addr.rsplit_once(':').map_or("", |(h, _)| h);
        let hp = HttpPeer::new(addr, self.tls, host.trim_matches(['[', ']']).to_owned());
        let nonce = out.nonce;
        let s = self.exchange_with_retries(peer, &hp, out).await?;
        self.answer(peer, s, hp, nonce)
    }

    /// Sends the request. A pooled connection the peer closed while it sat idle fails at
    /// once, before any answer: a request with a whole body goes again (every peer call is
    /// idempotent, and the first never reached a service), at most until the pool is drained
    /// and a fresh connection fails too. A streamed body cannot be sent twice.
    async fn exchange_with_retries(
        &self,
        peer: &Peer,
        hp: &HttpPeer,
        out: Outgoing,
    ) -> Result<HttpSession, PeerError> {
        let Outgoing { head, nonce, body } = out;
        let whole = body.whole().cloned();
        let mut body = Some(body);
        let mut tries = 0;
        loop {
            tries += 1;
            let (mut s, reused) = self
                .connector
                .get_http_session(hp)
                .await
                .map_err(unavailable)?;
            let payload = match (&whole, body.take()) {
                (Some(b), _) => Payload::bytes(b.clone()),
                (None, Some(p)) => p,
                (None, None) => return Err(unavailable("a streamed body cannot be sent again")),
            };
            match self.exchange(&mut s, head.clone(), nonce, payload).await {
                Ok(()) => return Ok(s),
                Err(e) if reused && whole.is_some() && tries < STALE_RETRIES => {
                    tracing::debug!(peer = %peer.id, error = %e, "pooled connection closed: asking again");
                }
                Err(e) => return Err(unavailable(e)),
            }
        }
    }

    /// Writes the request (head, framed body) and reads the answer's head on `s`.
    async fn exchange(
        &self,
        s: &mut HttpSession,
        head: RequestHeader,
        nonce: u128,
        body: Payload,
    ) -> Result<(), String> {
        s.write_request_header(Box::new(head))
            .await
            .map_err(|e| e.to_string())?;
        let (len, mut stream) = parts(body);
        let mut sealer = Sealer::new(self.key, nonce, Direction::Request);
        let (mut sent, mut ended) = (0u64, false);
        while let Some(pieces) =
            sealed(&mut stream, &mut sealer, (len, &mut sent), &mut ended).await?
        {
            for p in pieces {
                s.write_request_body(p, false)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        s.finish_request_body().await.map_err(|e| e.to_string())?;
        s.read_response_header().await.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The authenticated answer on `s`.
    fn answer(
        &self,
        peer: &Peer,
        s: HttpSession,
        hp: HttpPeer,
        nonce: u128,
    ) -> Result<PeerResponse, PeerError> {
        let header = |n: &str| {
            s.response_header()
                .and_then(|h| h.headers.get(n))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let status = s.response_header().map_or(0, |h| h.status.as_u16());
        let (node, note, tag) = (header(NODE), header(NOTE), header(REPLY));
        let Ok(len) = header(LEN).parse::<u64>() else {
            return Err(unavailable(format!(
                "{} answered {status} without a body length",
                peer.id
            )));
        };
        let head = ReplyHead {
            status,
            node: &node,
            note: &note,
            len,
        };
        if !reply_holds(&self.key, nonce, head, &tag) {
            // Not a member's answer (or a node of an earlier release): never handed on.
            return Err(unavailable(format!(
                "{} answered {status} without a valid reply tag",
                peer.id
            )));
        }
        if bodiless(status) {
            if len != 0 {
                return Err(unavailable(format!(
                    "{} answered {status} with a body",
                    peer.id
                )));
            }
            let connector = self.connector.clone();
            tokio::spawn(async move { connector.release_http_session(s, &hp, IDLE).await });
            return Ok(PeerResponse {
                status,
                note,
                node: Arc::from(node),
                body: Payload::empty(),
            });
        }
        let body = Unframed {
            pieces: Session {
                session: Some(s),
                peer: hp,
                connector: self.connector.clone(),
            },
            opener: Opener::new(self.key, nonce, Direction::Answer),
            left: len,
            gap: self.timeout * 10,
            finished: false,
        };
        Ok(PeerResponse {
            status,
            note,
            node: Arc::from(node),
            body: Payload::streamed(len, Box::new(body)),
        })
    }
}

fn record(kind: &str, r: &Result<PeerResponse, PeerError>, started: Instant) {
    let result = match r {
        Ok(a) => PeerError::of_status(a.status).map_or("ok", |e| e.label()),
        Err(e) => e.label(),
    };
    metrics::with(|m| {
        m.asks.with_label_values(&[kind, result]).inc();
        if r.is_ok() {
            m.ask_seconds.observe(started.elapsed().as_secs_f64());
        }
    });
}

/// An answer's body on its connection, which goes back to the pool once the body's end frame
/// was read.
struct Session {
    session: Option<HttpSession>,
    peer: HttpPeer,
    connector: Arc<Connector>,
}

#[async_trait]
impl Pieces for Session {
    async fn piece(&mut self) -> Result<Option<Bytes>, String> {
        let Some(s) = self.session.as_mut() else {
            return Ok(None);
        };
        s.read_response_body().await.map_err(|e| e.to_string())
    }

    async fn done(&mut self) {
        let Some(mut s) = self.session.take() else {
            return;
        };
        // The HTTP body's own end (the last chunk) follows the end frame.
        let end = tokio::time::timeout(Duration::from_secs(1), s.read_response_body()).await;
        if let Ok(Ok(None)) = end {
            self.connector
                .release_http_session(s, &self.peer, IDLE)
                .await;
        }
    }
}
