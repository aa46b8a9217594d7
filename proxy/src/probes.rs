//! Kubernetes probes, on the metrics listener (unauthenticated, like `/metrics`):
//!
//! - `GET /healthz`: 200 while the process serves (liveness);
//! - `GET /readyz`: 200 while it takes new requests, 503 once it is leaving (readiness: the
//!   Service stops sending it clients, its transfers in flight go on);
//! - `GET /drainz?seconds=N`: the pod's `preStop` hook. Marks the node leaving at once, then
//!   answers after N seconds (default 5, at most 120), the time endpoints take to drop it
//!   everywhere, before the kubelet's SIGTERM starts the grace period. A hook, not a shell
//!   command: the image has no shell.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

static LEAVING: AtomicBool = AtomicBool::new(false);

/// Longest `/drainz` wait.
const MAX_DRAIN: Duration = Duration::from_secs(120);

fn text(status: u16, body: &str) -> http::Response<Vec<u8>> {
    let mut r = http::Response::new(body.as_bytes().to_vec());
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    r
}

/// The answer to a probe at `path` with `query`, or `None` for another path.
pub async fn answer(path: &str, query: &str) -> Option<http::Response<Vec<u8>>> {
    match path {
        "/healthz" => Some(text(200, "ok\n")),
        "/readyz" if LEAVING.load(Ordering::Relaxed) => Some(text(503, "leaving\n")),
        "/readyz" => Some(text(200, "ready\n")),
        "/drainz" => {
            LEAVING.store(true, Ordering::Relaxed);
            let secs = query
                .split('&')
                .find_map(|p| p.strip_prefix("seconds="))
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(5);
            tracing::info!(seconds = secs, "preStop: leaving, not ready any more");
            tokio::time::sleep(Duration::from_secs(secs).min(MAX_DRAIN)).await;
            Some(text(200, "drained\n"))
        }
        _ => None,
    }
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
        LEAVING.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_until_drained_and_healthy_throughout() {
        assert_eq!(
            answer("/healthz", "").await.map(|r| r.status()),
            Some(http::StatusCode::OK)
        );
        assert_eq!(
            answer("/readyz", "").await.map(|r| r.status().as_u16()),
            Some(200)
        );
        assert_eq!(
            answer("/drainz", "seconds=0")
                .await
                .map(|r| r.status().as_u16()),
            Some(200)
        );
        assert_eq!(
            answer("/readyz", "").await.map(|r| r.status().as_u16()),
            Some(503)
        );
        assert_eq!(
            answer("/healthz", "").await.map(|r| r.status().as_u16()),
            Some(200)
        );
        assert!(answer("/other", "").await.is_none());
    }
}
