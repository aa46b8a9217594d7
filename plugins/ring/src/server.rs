//! The owner's side of the peer API: its own listener (hyper, HTTP/1.1 keep-alive), every
//! request authenticated with the fleet secret, answered by the bucket's [`PeerServer`].
//! Served until the process exits, so a draining node stays a donor through its grace period.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use floe_core::fleet::{
    BlockAsk, PeerCall, PeerError, PeerServer, PeerService, PeerSource, PEER_CALL_MAX_BYTES,
};
use floe_core::{ETag, ObjectKey};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use percent_encoding::percent_decode_str;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::metrics;
use crate::wire::{verify, HeadDoc, AUTH, NODE, SOURCE};

/// Longest a peer's TLS handshake may take.
const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// Most entries of one hot list (a hand-over list): 64 Ki, a node's whole recent-block list;
/// about 10 MiB of JSON, asked once per giver and bucket in a hand-over.
pub const HOT_LIST_MAX: usize = 1 << 16;

/// Peer servers by bucket.
pub type Servers = Arc<RwLock<HashMap<String, Arc<dyn PeerServer>>>>;

/// Other plugins' peer services by name (see `Fleet::mount`).
pub type Services = Arc<RwLock<HashMap<String, Arc<dyn PeerService>>>>;

/// What the listener needs.
pub struct PeerApi {
    /// This node's id.
    pub node: Arc<str>,
    /// The fleet secret.
    pub secret: Arc<Vec<u8>>,
    /// The nonces of requests accepted lately (a captured request is refused a second time).
    pub seen: Arc<crate::wire::ReplayGuard>,
    /// Servers by bucket.
    pub servers: Servers,
    /// Mounted services by name (`/v1/x/<name>/...`).
    pub services: Services,
    /// Answers being filled from the origin right now.
    pub fills: Arc<AtomicUsize>,
    /// Above this many, an ask that would fill is refused as busy (the asker goes to the next
    /// rendezvous choice): one hot owner cannot queue the fleet's misses behind its origin link.
    pub max_fills: usize,
}

/// Holds one unit of the fills gauge.
struct FillGuard(Arc<AtomicUsize>);

impl FillGuard {
    /// Takes a fill slot; none (the slot given back at once) when `max` were taken.
    fn take(fills: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let guard = Self(fills.clone());
        (fills.fetch_add(1, Ordering::Relaxed) < max).then_some(guard)
    }
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body fed by a channel (an owner's blocks as they are served).
pub struct ChannelBody {
    rx: Option<mpsc::Receiver<Result<Bytes, std::io::Error>>>,
    len: u64,
    once: Option<Bytes>,
}

impl ChannelBody {
    fn full(b: Bytes) -> Self {
        Self {
            rx: None,
            len: b.len() as u64,
            once: Some(b),
        }
    }
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
        SizeHint::with_exact(self.len)
    }
}

fn answer(status: u16, body: Bytes) -> Response<ChannelBody> {
    let mut r = Response::new(ChannelBody::full(body));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    r
}

fn fail(kind: &str, e: &PeerError) -> Response<ChannelBody> {
    let result = match e {
        PeerError::Conflict => "conflict",
        PeerError::NotFound => "not_found",
        PeerError::Refused(_) => "refused",
        PeerError::Busy => "busy",
        PeerError::Unavailable(_) => "unavailable",
    };
    metrics::with(|m| m.served.with_label_values(&[kind, result]).inc());
    answer(e.status(), Bytes::from(e.to_string()))
}

fn denied() -> Response<ChannelBody> {
    metrics::with(|m| m.served.with_label_values(&["any", "denied"]).inc());
    answer(403, Bytes::from_static(b"fleet authentication failed"))
}

/// Bodies above this are hashed on the blocking pool (a fragment can be megabytes).
const INLINE_HASH_BYTES: usize = 256 << 10;

/// The [`crate::wire::body_hash`] of `body`, off the async threads when it is large.
pub(crate) async fn hash_off_thread(body: Bytes) -> String {
    if body.len() <= INLINE_HASH_BYTES {
        return crate::wire::body_hash(&body);
    }
    // A hashing task that died yields no hash, and the request then fails its check.
    tokio::task::spawn_blocking(move || crate::wire::body_hash(&body))
        .await
        .unwrap_or_default()
}

fn query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((
                k.to_owned(),
                percent_decode_str(v).decode_utf8().ok()?.into_owned(),
            ))
        })
        .collect()
}

impl PeerApi {
    async fn handle(&self, req: Request<Incoming>) -> Response<ChannelBody> {
        let path = req
            .uri()
            .path_and_query()
            .map_or(String::new(), |p| p.as_str().to_owned());
        let auth = req
            .headers()
            .get(AUTH)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let auth = auth.to_owned();
        let method = req.method().as_str().to_owned();
        let call = path.starts_with("/v1/x/");
        if method != "GET" && !call {
            return denied();
        }
        // The signature covers the body: a call's body is read (bounded) before it is checked.
        let body = if call {
            let limited = http_body_util::Limited::new(req.into_body(), PEER_CALL_MAX_BYTES);
            match http_body_util::BodyExt::collect(limited).await {
                Ok(b) => b.to_bytes(),
                Err(e) => return fail("call", &PeerError::Refused(format!("body: {e}"))),
            }
        } else {
            Bytes::new()
        };
        let hash = hash_off_thread(body.clone()).await;
        if !verify(&self.secret, (&method, &path, &hash), &auth, &self.seen) {
            return denied();
        }
        if let Some(rest) = path.strip_prefix("/v1/x/") {
            return self.service_call(body, &method, rest).await;
        }
        let uri = http::Uri::try_from(path.as_str()).unwrap_or_default();
        let q = query(uri.query().unwrap_or(""));
        let get = |k: &str| q.get(k).map_or("", String::as_str).to_owned();
        if uri.path() == "/v1/hot" {
            return self.hot(&get("bucket"), get("limit").parse().unwrap_or(0));
        }
        let server = self
            .servers
            .read()
            .ok()
            .and_then(|s| s.get(&get("bucket")).cloned());
        let (Some(server), Ok(key)) = (server, ObjectKey::parse(&get("key"))) else {
            return fail("any", &PeerError::NotFound);
        };
        match uri.path() {
            "/v1/head" => match server
                .head(&key, ETag::parse(&get("stale")).ok().as_ref())
                .await
            {
                Ok(h) => match serde_json::to_vec(&HeadDoc::of(&h)) {
                    Ok(doc) => {
                        metrics::with(|m| m.served.with_label_values(&["head", "ok"]).inc());
                        answer(200, Bytes::from(doc))
                    }
                    Err(e) => fail("head", &PeerError::Unavailable(e.to_string())),
                },
                Err(e) => fail("head", &e),
            },
            "/v1/blocks" => self.blocks(&*server, &key, &q).await,
            _ => fail("any", &PeerError::Refused("no such path".into())),
        }
    }

    /// A call to a mounted service: `rest` is `<service>/<path below it>`.
    async fn service_call(&self, body: Bytes, method: &str, rest: &str) -> Response<ChannelBody> {
        let (name, below) = rest.split_once('/').unwrap_or((rest, ""));
        let svc = self.services.read().ok().and_then(|s| s.get(name).cloned());
        let Some(svc) = svc else {
            // Not mounted (yet: a node starting up): a 404 would read as the service's own.
            return fail(
                "call",
                &PeerError::Unavailable(format!("no service {name} here")),
            );
        };
        let method = match method {
            "GET" => "GET",
            "PUT" => "PUT",
            "POST" => "POST",
            "DELETE" => "DELETE",
            _ => return fail("call", &PeerError::Refused("method".into())),
        };
        let reply = svc
            .call(PeerCall {
                method,
                path: format!("/{below}"),
                body,
            })
            .await;
        metrics::with(|m| m.served.with_label_values(&["call", "ok"]).inc());
        answer(reply.status, reply.body)
    }

    fn hot(&self, bucket: &str, limit: usize) -> Response<ChannelBody> {
        let server = self
            .servers
            .read()
            .ok()
            .and_then(|s| s.get(bucket).cloned());
        let Some(server) = server else {
            return fail("hot", &PeerError::NotFound);
        };
        match serde_json::to_vec(&server.hot(limit.min(HOT_LIST_MAX))) {
            Ok(doc) => {
                metrics::with(|m| m.served.with_label_values(&["hot", "ok"]).inc());
                answer(200, Bytes::from(doc))
            }
            Err(e) => fail("hot", &PeerError::Unavailable(e.to_string())),
        }
    }

    async fn blocks(
        &self,
        server: &dyn PeerServer,
        key: &ObjectKey,
        q: &HashMap<String, String>,
    ) -> Response<ChannelBody> {
        let get = |k: &str| q.get(k).map_or("", String::as_str);
        let num = |k: &str| get(k).parse::<u64>().ok();
        let (Ok(etag), Some(size), Some(bs), Some(first), Some(last)) = (
            ETag::parse(get("etag")),
            num("size"),
            num("block"),
            num("first"),
            num("last"),
        ) else {
            return fail("blocks", &PeerError::Refused("malformed ask".into()));
        };
        if first > last || last >= size {
            return fail(
                "blocks",
                &PeerError::Refused("range outside the object".into()),
            );
        }
        // The fill slot is taken before the ask, not once its first bytes are ready (a whole
        // origin round trip later): asks arriving together must see each other's fills.
        let slot = match get("cached") {
            "1" => None,
            _ => FillGuard::take(&self.fills, self.max_fills),
        };
        let ask = BlockAsk {
            bucket: get("bucket"),
            key: key.as_str(),
            etag: &etag,
            size,
            block_bytes: bs,
            cached_only: slot.is_none(),
            first,
            last,
        };
        let mut got = match server.blocks(key, &ask).await {
            Ok(b) => b,
            Err(PeerError::NotFound) if get("cached") != "1" => {
                return fail("blocks", &PeerError::Busy)
            }
            Err(e) => return fail("blocks", &e),
        };
        // A hit gives its slot back at once; a fill holds it until its body is sent.
        let guard = slot.filter(|_| got.source == PeerSource::Fill);
        let source = match got.source {
            PeerSource::Hit => "hit",
            PeerSource::Fill => "fill",
        };
        metrics::with(|m| m.served.with_label_values(&["blocks", source]).inc());
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let _guard = guard;
            loop {
                let item = match got.body.next().await {
                    Ok(Some(b)) => Ok(b),
                    Ok(None) => break,
                    // Cutting the body (short of its length) tells the asker to go to the origin.
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                };
                let stop = item.is_err();
                if tx.send(item).await.is_err() || stop {
                    break;
                }
            }
        });
        let mut r = Response::new(ChannelBody {
            rx: Some(rx),
            len: ask.len(),
            once: None,
        });
        let h = r.headers_mut();
        h.insert(http::header::CONTENT_LENGTH, ask.len().into());
        if let Ok(v) = http::HeaderValue::from_str(&self.node) {
            h.insert(NODE, v);
        }
        h.insert(SOURCE, http::HeaderValue::from_static(source));
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
