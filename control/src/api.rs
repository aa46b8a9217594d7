//! floe-control's HTTP listener (hyper, HTTP/1.1): `GET /status`, `GET /metrics` and the
//! console (`GET /console`, its document `GET /console/data`) and pins (`/pins`, see
//! [`crate::pins::api`]) for operators, and with a scheduler configured its routes (see [`floe_sched::http`]):
//! `POST /events` (CloudEvents, structured or binary mode), `/hooks/<path>` (webhooks),
//! `POST /deployments/<name>/dispatch`, `GET /runs`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::state::Control;
use crate::status::{document, metric_families};
use floe_core::worker::{Activity, Handle, Shutdown};

/// Largest request body taken (an event, a webhook): the queue stores bounded events.
pub const MAX_BODY: usize = 1 << 20;

pub use floe_sched::http::{error, json_reply, Reply};

/// Every metric floe-control exports, gathered now: what `GET /metrics` encodes and the OTLP
/// exporter reports ([`crate::otel::bridge`]).
pub async fn families(ctl: &Control) -> Vec<prometheus::proto::MetricFamily> {
    let mut f = metric_families(ctl);
    if let Some(s) = ctl.sched.get() {
        f.extend(floe_sched::http::metric_families(s).await);
    }
    f
}

async fn route(ctl: Arc<Control>, req: Request<Incoming>) -> Reply {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    match (&parts.method, path.as_str()) {
        (&hyper::Method::GET, "/status") => {
            let mut doc = document(&ctl);
            if let Some(s) = ctl.sched.get() {
                doc["scheduler"] = s.status().await;
            }
            json_reply(StatusCode::OK, &doc)
        }
        (&hyper::Method::GET, "/console" | "/console/") => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            crate::console::PAGE.to_owned(),
        ),
        (&hyper::Method::GET, "/console/data") => {
            json_reply(StatusCode::OK, &crate::console::data(&ctl).await)
        }
        (m, "/pins") => crate::pins::api::route(&ctl, m, parts.uri.query()).await,
        (&hyper::Method::GET, "/metrics") => {
            use prometheus::Encoder;
            let mut out = Vec::new();
            let _ = prometheus::TextEncoder::new().encode(&families(&ctl).await, &mut out);
            let text = String::from_utf8(out).unwrap_or_default();
            (StatusCode::OK, "text/plain; version=0.0.4", text)
        }
        _ => {
            let Some(s) = ctl.sched.get() else {
                return error(
                    StatusCode::NOT_FOUND,
                    "GET /status, /metrics, /console or /pins",
                );
            };
            let body = match Limited::new(body, MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("body over {MAX_BODY} bytes"),
                    );
                }
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            floe_sched::http::route(s, &parts, body).await
        }
    }
}

/// Serves the listener until shutdown.
pub async fn serve(ctl: Arc<Control>, h: Handle, listener: TcpListener, mut stop: Shutdown) {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    h.set(Activity::Idle, addr);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((sock, _)) = accepted else { continue };
        let ctl = ctl.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let ctl = ctl.clone();
                async move {
                    let (code, kind, body) = route(ctl, req).await;
                    let mut r = Response::new(Full::new(Bytes::from(body)));
                    *r.status_mut() = code;
                    r.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static(kind),
                    );
                    Ok::<_, Infallible>(r)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(sock), svc)
                .await;
        });
    }
}
