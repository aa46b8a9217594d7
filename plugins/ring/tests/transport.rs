//! The peer transport end to end, in process: a listener with a mounted service, a client
//! calling it over TCP. Streamed bodies both ways, bodiless answers, the reply tag, and an
//! outsider refused.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::fleet::{Payload, Peer, PeerError, PeerRequest, PeerResponse, PeerService};
use floe_core::{ByteStream, OriginError};
use floe_ring::client::PeerClient;
use floe_ring::server::{PeerApi, PeerListener};

/// Echoes a request's body back in pieces (`/echo`), answers 204 (`/empty`), or an endless
/// body cut short (`/cut`).
struct Echo;

/// A body of `n` pieces of `size` bytes, each the piece's index.
struct Pieces {
    left: usize,
    size: usize,
    cut_after: Option<usize>,
}

#[async_trait]
impl ByteStream for Pieces {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        if self.cut_after == Some(self.left) {
            return Err(OriginError::Transport("cut".into()));
        }
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        tokio::task::yield_now().await;
        Ok(Some(Bytes::from(vec![self.left as u8; self.size])))
    }
}

#[async_trait]
impl PeerService for Echo {
    async fn open(&self, request: PeerRequest) -> PeerResponse {
        match request.path.as_str() {
            "/echo" => {
                let body = request.body.collect(64 << 20).await.unwrap();
                PeerResponse {
                    status: 200,
                    note: format!("{} {}", request.method, body.len()),
                    node: Arc::from(""),
                    body: Payload::bytes(body),
                }
            }
            "/empty" => PeerResponse::whole(204, Bytes::new()),
            "/cut" => PeerResponse {
                status: 200,
                note: String::new(),
                node: Arc::from(""),
                body: Payload::streamed(
                    10 << 20,
                    Box::new(Pieces {
                        left: 10,
                        size: 1 << 20,
                        cut_after: Some(5),
                    }),
                ),
            },
            _ => PeerResponse::whole(404, Bytes::from_static(b"no such call")),
        }
    }
}

async fn listener(secret: &[u8]) -> (Arc<PeerListener>, u16) {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let api = PeerApi {
        node: Arc::from("owner"),
        secret: Arc::new(secret.to_vec()),
        key: floe_ring::frames::key(secret),
        seen: Arc::default(),
        services: Arc::default(),
    };
    api.services
        .write()
        .unwrap()
        .insert("t".into(), Arc::new(Echo));
    let l = Arc::new(PeerListener {
        listener: std::sync::Mutex::new(Some(tcp)),
        api: Arc::new(api),
        tls: None,
    });
    let serving = l.clone();
    tokio::spawn(async move { serving.serve().await });
    (l, port)
}

fn peer(port: u16) -> Arc<Peer> {
    Arc::new(Peer {
        id: Arc::from("owner"),
        addr: Arc::from(format!("127.0.0.1:{port}")),
    })
}

async fn read_all(mut body: Box<dyn ByteStream>) -> Result<Vec<u8>, OriginError> {
    let mut out = Vec::new();
    while let Some(b) = body.next().await? {
        out.extend_from_slice(&b);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_goes_both_ways_checked_and_bodiless_answers_hold() {
    let (_l, port) = listener(b"fleet-secret").await;
    let client = PeerClient::new(
        Arc::new(b"fleet-secret".to_vec()),
        Duration::from_secs(5),
        None,
    );
    let wait = Duration::from_secs(10);
    for round in 0..3 {
        // 3 MiB in 1 MiB pieces: more than one frame per piece, no whole-body buffer on the way.
        let body = Payload::streamed(
            3 << 20,
            Box::new(Pieces {
                left: 3,
                size: 1 << 20,
                cut_after: None,
            }),
        );
        let request = PeerRequest {
            method: "PUT",
            path: "/echo".into(),
            body,
        };
        let answer = client.open(&peer(port), "t", request, wait).await.unwrap();
        assert_eq!(
            (answer.status, &*answer.node),
            (200, "owner"),
            "round {round}"
        );
        assert_eq!(answer.note, format!("PUT {}", 3 << 20));
        assert_eq!(answer.body.len(), 3 << 20);
        let got = read_all(answer.body.into_stream()).await.unwrap();
        let want: Vec<u8> = [2u8, 1, 0].iter().flat_map(|i| vec![*i; 1 << 20]).collect();
        assert_eq!(got, want);
    }
    let empty = PeerRequest {
        method: "POST",
        path: "/empty".into(),
        body: Payload::empty(),
    };
    let answer = client.open(&peer(port), "t", empty, wait).await.unwrap();
    assert_eq!((answer.status, answer.body.len()), (204, 0));
    let missing = PeerRequest {
        method: "GET",
        path: "/nothing".into(),
        body: Payload::empty(),
    };
    let answer = client.open(&peer(port), "t", missing, wait).await.unwrap();
    assert_eq!(answer.status, 404);
    assert_eq!(answer.body.collect(1024).await.unwrap(), "no such call");
    // A service not mounted here is unavailable, never the service's own 404.
    let other = PeerRequest {
        method: "GET",
        path: "/x".into(),
        body: Payload::empty(),
    };
    let r = client.open(&peer(port), "nope", other, wait).await;
    assert!(matches!(r, Err(PeerError::Unavailable(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_answer_fails_and_an_outsider_gets_nothing() {
    let (_l, port) = listener(b"fleet-secret").await;
    let wait = Duration::from_secs(10);
    let client = PeerClient::new(
        Arc::new(b"fleet-secret".to_vec()),
        Duration::from_secs(5),
        None,
    );
    let cut = PeerRequest {
        method: "GET",
        path: "/cut".into(),
        body: Payload::empty(),
    };
    let answer = client.open(&peer(port), "t", cut, wait).await.unwrap();
    let got = read_all(answer.body.into_stream()).await;
    assert!(
        got.is_err(),
        "a body cut by its owner must fail, not end short"
    );
    let outsider = PeerClient::new(
        Arc::new(b"not-the-secret".to_vec()),
        Duration::from_secs(5),
        None,
    );
    let echo = PeerRequest {
        method: "PUT",
        path: "/echo".into(),
        body: Payload::bytes(Bytes::from_static(b"hello")),
    };
    let r = outsider.open(&peer(port), "t", echo, wait).await;
    assert!(matches!(r, Err(PeerError::Unavailable(_))), "{r:?}");
}
