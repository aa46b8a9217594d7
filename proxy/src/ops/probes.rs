//! Kubernetes probes, on the metrics listener (unauthenticated, like `/metrics`):
//!
//! - `GET /healthz`: 200 while the process serves (liveness);
//! - `GET /readyz`: 200 while it takes new requests, 503 once it is leaving (readiness: the
//!   Service stops sending it clients, its transfers in flight go on) or while a plugin says
//!   it is not ready yet (write-back catching up on the writes acknowledged while it was away);
//! - `GET /drainz?seconds=N` with the header `X-Floe-Drain: yes`: the pod's `preStop` hook.
//!   Marks the node leaving at once, then answers after N seconds (default 5, at most 120),
//!   the time endpoints take to drop it everywhere, before the kubelet's SIGTERM starts the
//!   grace period. A hook, not a shell command: the image has no shell. Without the header it
//!   is refused (403), so a crawler or scraper following links never takes a node out; and
//!   `GET /drainz?undo` (with the header) makes a node that is not shutting down ready again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

static LEAVING: AtomicBool = AtomicBool::new(false);
/// The server is shutting down: leaving for good, whatever `/drainz?undo` asks.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// The header a drain must carry (Kubernetes' `httpGet` hooks can send headers).
pub const DRAIN_HEADER: &str = "x-floe-drain";

/// What else keeps the node from being ready (its plugins: write-back catching up), set once
/// at start-up.
static GATE: std::sync::OnceLock<Gate> = std::sync::OnceLock::new();

/// A reason the node is not ready, or `None`.
pub type Gate = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// Makes `/readyz` answer 503 while `gate` gives a reason (first call wins).
pub fn gate(gate: Gate) {
    let _ = GATE.set(gate);
}

/// Longest `/drainz` wait.
const MAX_DRAIN: Duration = Duration::from_secs(120);

fn text(status: u16, body: &str) -> http::Response<Vec<u8>> {
    let mut r = http::Response::new(body.as_bytes().to_vec());
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    r
}

/// The answer to a probe at `path` with `query` and request `headers`, or `None` for another
/// path.
pub async fn answer(
    path: &str,
    query: &str,
    headers: &http::HeaderMap,
) -> Option<http::Response<Vec<u8>>> {
    match path {
        "/healthz" => Some(text(200, "ok\n")),
        "/readyz" if LEAVING.load(Ordering::Relaxed) => Some(text(503, "leaving\n")),
        "/readyz" => Some(match GATE.get().and_then(|gate| gate()) {
            Some(why) => text(503, &format!("not ready: {why}\n")),
            None => text(200, "ready\n"),
        }),
        "/drainz" => Some(drain(query, headers).await),
        _ => None,
    }
}

async fn drain(query: &str, headers: &http::HeaderMap) -> http::Response<Vec<u8>> {
    if headers.get(DRAIN_HEADER).and_then(|v| v.to_str().ok()) != Some("yes") {
        return text(403, "a drain needs the header X-Floe-Drain: yes\n");
    }
    if query
        .split('&')
        .any(|p| p == "undo" || p.starts_with("undo="))
    {
        if SHUTTING_DOWN.load(Ordering::Relaxed) {
            return text(409, "shutting down: leaving for good\n");
        }
        LEAVING.store(false, Ordering::Relaxed);
        tracing::info!("drain undone: ready again");
        return text(200, "ready\n");
    }
    LEAVING.store(true, Ordering::Relaxed);
    let secs = query
        .split('&')
        .find_map(|p| p.strip_prefix("seconds="))
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(5);
    tracing::info!(seconds = secs, "preStop: leaving, not ready any more");
    tokio::time::sleep(Duration::from_secs(secs).min(MAX_DRAIN)).await;
    text(200, "drained\n")
}

/// Marks the node leaving when the server shuts down (SIGTERM without a preStop hook, or a
/// graceful upgrade) ("floe-readiness").
pub struct LeaveOnShutdown;

#[async_trait]
impl BackgroundService for LeaveOnShutdown {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        SHUTTING_DOWN.store(true, Ordering::Relaxed);
        LEAVING.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_until_drained_and_healthy_throughout() {
        let none = http::HeaderMap::new();
        let mut drain = http::HeaderMap::new();
        drain.insert(DRAIN_HEADER, http::HeaderValue::from_static("yes"));
        let status = |r: Option<http::Response<Vec<u8>>>| r.map(|r| r.status().as_u16());
        assert_eq!(status(answer("/healthz", "", &none).await), Some(200));
        assert_eq!(status(answer("/readyz", "", &none).await), Some(200));
        // A link-follower's GET takes nothing out.
        assert_eq!(
            status(answer("/drainz", "seconds=0", &none).await),
            Some(403)
        );
        assert_eq!(status(answer("/readyz", "", &none).await), Some(200));
        assert_eq!(
            status(answer("/drainz", "seconds=0", &drain).await),
            Some(200)
        );
        assert_eq!(status(answer("/readyz", "", &none).await), Some(503));
        assert_eq!(status(answer("/healthz", "", &none).await), Some(200));
        // Reversible until the server shuts down.
        assert_eq!(status(answer("/drainz", "undo", &drain).await), Some(200));
        assert_eq!(status(answer("/readyz", "", &none).await), Some(200));
        assert!(answer("/other", "", &none).await.is_none());
    }
}
