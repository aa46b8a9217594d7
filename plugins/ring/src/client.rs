//! The asker's side of the peer API, over Pingora's connector (pooled keep-alive connections,
//! as origin reads use). Every ask is bounded: connecting and the start of the answer within
//! the peer timeout (a head, which may wait on the owner's origin HEAD, within four of them),
//! and each later piece of a body within ten, so a slow or dead owner costs the asker one
//! timeout before it goes to the origin itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{
    BlockAsk, HotBlock, Peer, PeerBody, PeerCall, PeerError, PeerReply, PeerSource,
    PEER_CALL_MAX_BYTES,
};
use floe_core::{ByteStream, ETag, ObjectHead, OriginError};
use pingora::connectors::http::Connector;
use pingora::connectors::ConnectorOptions;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;

use crate::metrics;
use crate::wire::{enc, sign, HeadDoc, AUTH, NODE, SOURCE};

/// How long an idle pooled connection is kept: well under the peer server's keep-alive (60 s,
/// Pingora's), so the asker drops a connection before the peer closes it under a reuse.
const IDLE: Option<Duration> = Some(Duration::from_secs(30));
/// Tries of one ask on pooled connections that turn out closed (the last on a fresh one when
/// the pool holds fewer).
const STALE_RETRIES: u32 = 4;
/// Largest head document read.
const MAX_HEAD_DOC: usize = 1 << 20;

/// Asks peers.
pub struct PeerClient {
    connector: Arc<Connector>,
    secret: Arc<Vec<u8>>,
    timeout: Duration,
    tls: bool,
}

fn unavailable(e: impl std::fmt::Display) -> PeerError {
    PeerError::Unavailable(e.to_string())
}

impl PeerClient {
    /// A client authenticating with `secret`, waiting `timeout` for a peer to answer; over
    /// TLS trusting the CA in file `ca` when it is set.
    pub fn new(secret: Arc<Vec<u8>>, timeout: Duration, ca: Option<&str>) -> Self {
        let opts = ca.map(|ca| ConnectorOptions {
            ca_file: Some(ca.to_owned()),
            ..ConnectorOptions::new(128)
        });
        Self {
            connector: Arc::new(Connector::new(opts)),
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

    /// Sends `GET path` to `peer` and reads the answer's header, within `wait`.
    async fn get(
        &self,
        peer: &Peer,
        path: &str,
        wait: Duration,
    ) -> Result<(HttpSession, HttpPeer, u16), PeerError> {
        self.send(peer, "GET", path, Bytes::new(), wait).await
    }

    /// Sends `method path` with `body` to `peer` and reads the answer's header, within `wait`.
    async fn send(
        &self,
        peer: &Peer,
        method: &str,
        path: &str,
        body: Bytes,
        wait: Duration,
    ) -> Result<(HttpSession, HttpPeer, u16), PeerError> {
        let hash = crate::server::hash_off_thread(body.clone()).await;
        let work = async {
            let addr = Self::resolve(&peer.addr).await?;
            // The certificate must name the host of the peer's address (an IP or a DNS name).
            let host = peer.addr.rsplit_once(':').map_or("", |(h, _)| h);
            let hp = HttpPeer::new(addr, self.tls, host.trim_matches(['[', ']']).to_owned());
            let mut req =
                RequestHeader::build(method, path.as_bytes(), None).map_err(unavailable)?;
            req.insert_header(AUTH, sign(&self.secret, method, path, &hash))
                .map_err(unavailable)?;
            if method != "GET" {
                req.insert_header("content-length", body.len().to_string())
                    .map_err(unavailable)?;
            }
            req.insert_header("host", &*peer.addr)
                .map_err(unavailable)?;
            if let Some(t) = floe_core::trace::current_header() {
                req.insert_header("traceparent", t).map_err(unavailable)?;
            }
            // A pooled connection the peer closed while it sat idle fails at once, before
            // any answer: the ask goes again (every peer call is idempotent), at most until the
            // pool is drained and a fresh connection fails too.
            let mut tries = 0;
            let s = loop {
                tries += 1;
                let (mut s, reused) = self
                    .connector
                    .get_http_session(&hp)
                    .await
                    .map_err(unavailable)?;
                match Self::exchange(&mut s, req.clone(), body.clone()).await {
                    Ok(()) => break s,
                    Err(e) if reused && tries < STALE_RETRIES => {
                        tracing::debug!(peer = %peer.id, error = %e, "pooled connection closed: asking again");
                    }
                    Err(e) => return Err(unavailable(e)),
                }
            };
            let status = s.response_header().map_or(0, |h| h.status.as_u16());
            Ok((s, hp, status))
        };
        tokio::time::timeout(wait, work)
            .await
            .map_err(|_| unavailable(format!("{} did not answer in {wait:?}", peer.id)))?
    }

    /// Writes the request and reads the answer's header on `s`.
    async fn exchange(s: &mut HttpSession, req: RequestHeader, body: Bytes) -> pingora::Result<()> {
        s.write_request_header(Box::new(req)).await?;
        if !body.is_empty() {
            s.write_request_body(body, true).await?;
        }
        s.finish_request_body().await?;
        s.read_response_header().await?;
        Ok(())
    }

    fn status_error(status: u16) -> PeerError {
        match status {
            412 => PeerError::Conflict,
            429 => PeerError::Busy,
            404 => PeerError::NotFound,
            400 => PeerError::Refused("bad ask".into()),
            s => unavailable(format!("peer answered {s}")),
        }
    }

    /// The owner's version of (`bucket`, `key`).
    pub async fn head(
        &self,
        peer: &Peer,
        bucket: &str,
        key: &str,
        stale: Option<&ETag>,
    ) -> Result<ObjectHead, PeerError> {
        let mut path = format!("/v1/head?bucket={}&key={}", enc(bucket), enc(key));
        if let Some(e) = stale {
            path.push_str(&format!("&stale={}", enc(e.as_str())));
        }
        let started = Instant::now();
        let r = self.head_inner(peer, &path).await;
        record("head", &r, started);
        r
    }

    async fn head_inner(&self, peer: &Peer, path: &str) -> Result<ObjectHead, PeerError> {
        let doc = self
            .document(peer, path, MAX_HEAD_DOC, self.timeout * 4)
            .await?;
        serde_json::from_slice::<HeadDoc>(&doc)
            .ok()
            .and_then(HeadDoc::into_head)
            .ok_or_else(|| unavailable("unreadable head document"))
    }

    /// Up to `limit` hot blocks of `bucket` that `peer` served recently, most recent first
    /// (a hand-over list, from which the taker keeps its own).
    pub async fn hot(
        &self,
        peer: &Peer,
        bucket: &str,
        limit: usize,
    ) -> Result<Vec<HotBlock>, PeerError> {
        let path = format!("/v1/hot?bucket={}&limit={limit}", enc(bucket));
        let doc = self
            .document(peer, &path, 64 << 20, self.timeout * 20)
            .await?;
        serde_json::from_slice(&doc).map_err(|e| unavailable(format!("unreadable hot list: {e}")))
    }

    /// Sends `call` to the service `service` on `peer`; the whole answer within `wait`.
    pub async fn call(
        &self,
        peer: &Peer,
        service: &str,
        call: PeerCall,
        wait: Duration,
    ) -> Result<PeerReply, PeerError> {
        let path = format!("/v1/x/{service}{}", call.path);
        let started = Instant::now();
        let work = async {
            let (mut s, hp, status) = self.send(peer, call.method, &path, call.body, wait).await?;
            let mut body = Vec::new();
            while let Some(b) = s.read_response_body().await.map_err(unavailable)? {
                body.extend_from_slice(&b);
                if body.len() > PEER_CALL_MAX_BYTES {
                    return Err(unavailable("answer too large"));
                }
            }
            self.connector.release_http_session(s, &hp, IDLE).await;
            Ok(PeerReply {
                status,
                body: Bytes::from(body),
            })
        };
        let r = tokio::time::timeout(wait, work)
            .await
            .map_err(|_| unavailable(format!("{} did not answer in {wait:?}", peer.id)))
            .and_then(|r| r);
        record("call", &r, started);
        r
    }

    /// The body of a 200 answer to `GET path`, at most `max` bytes, read within `wait`.
    async fn document(
        &self,
        peer: &Peer,
        path: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<u8>, PeerError> {
        let (mut s, hp, status) = self.get(peer, path, self.timeout * 4).await?;
        if status != 200 {
            self.connector.release_http_session(s, &hp, IDLE).await;
            return Err(Self::status_error(status));
        }
        let mut doc = Vec::new();
        let read = async {
            while let Some(b) = s.read_response_body().await.map_err(unavailable)? {
                doc.extend_from_slice(&b);
                if doc.len() > max {
                    return Err(unavailable("answer too large"));
                }
            }
            Ok(())
        };
        tokio::time::timeout(wait, read)
            .await
            .map_err(|_| unavailable("answer timed out"))??;
        self.connector.release_http_session(s, &hp, IDLE).await;
        Ok(doc)
    }

    /// The bytes of `ask` from `peer`.
    pub async fn blocks(&self, peer: &Peer, ask: &BlockAsk<'_>) -> Result<PeerBody, PeerError> {
        let path = format!(
            "/v1/blocks?bucket={}&key={}&etag={}&size={}&block={}&first={}&last={}&cached={}",
            enc(ask.bucket),
            enc(ask.key),
            enc(ask.etag.as_str()),
            ask.size,
            ask.block_bytes,
            ask.first,
            ask.last,
            u8::from(ask.cached_only)
        );
        let started = Instant::now();
        let r = self.blocks_inner(peer, &path, ask.len()).await;
        record("blocks", &r, started);
        r
    }

    async fn blocks_inner(&self, peer: &Peer, path: &str, len: u64) -> Result<PeerBody, PeerError> {
        let (s, hp, status) = self.get(peer, path, self.timeout).await?;
        if status != 200 {
            self.connector.release_http_session(s, &hp, IDLE).await;
            return Err(Self::status_error(status));
        }
        let header = |n: &str| {
            s.response_header()
                .and_then(|h| h.headers.get(n))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let node: Arc<str> = Arc::from(header(NODE).unwrap_or_else(|| peer.id.to_string()));
        let source = match header(SOURCE).as_deref() {
            Some("hit") => PeerSource::Hit,
            _ => PeerSource::Fill,
        };
        Ok(PeerBody {
            node,
            source,
            body: Box::new(PeerStream {
                session: Some(s),
                peer: hp,
                connector: self.connector.clone(),
                remaining: len,
                gap: self.timeout * 10,
            }),
        })
    }
}

fn record<T>(kind: &str, r: &Result<T, PeerError>, started: Instant) {
    let result = match r {
        Ok(_) => "ok",
        Err(PeerError::Conflict) => "conflict",
        Err(PeerError::NotFound) => "not_found",
        Err(PeerError::Refused(_)) => "refused",
        Err(PeerError::Busy) => "busy",
        Err(PeerError::Unavailable(_)) => "unavailable",
    };
    metrics::with(|m| {
        m.asks.with_label_values(&[kind, result]).inc();
        if r.is_ok() {
            m.ask_seconds.observe(started.elapsed().as_secs_f64());
        }
    });
}

/// An owner's answer body: exactly the asked bytes, each piece within the gap timeout.
struct PeerStream {
    session: Option<HttpSession>,
    peer: HttpPeer,
    connector: Arc<Connector>,
    remaining: u64,
    gap: Duration,
}

#[async_trait]
impl ByteStream for PeerStream {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        let Some(s) = self.session.as_mut() else {
            return Ok(None);
        };
        let piece = tokio::time::timeout(self.gap, s.read_response_body())
            .await
            .map_err(|_| OriginError::Transport("peer body stalled".into()))?
            .map_err(|e| OriginError::Transport(format!("peer body: {e}")))?;
        match piece {
            Some(b) => {
                self.remaining = self.remaining.saturating_sub(b.len() as u64);
                Ok(Some(b))
            }
            None if self.remaining == 0 => {
                if let Some(s) = self.session.take() {
                    self.connector
                        .release_http_session(s, &self.peer, IDLE)
                        .await;
                }
                Ok(None)
            }
            None => Err(OriginError::Transport(format!(
                "peer body ended {} bytes short",
                self.remaining
            ))),
        }
    }
}
