//! The scheduler's HTTP routes on floe-control's listener. Every accepted event is persisted
//! before the 202 that acknowledges it; a store failure answers 503 so the sender retries.

use std::sync::Arc;

use bytes::Bytes;
use cloudevents::Event;
use hmac::{Hmac, Mac};
use hyper::http::request::Parts;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use super::config::Trigger;
use super::{event, Scheduler};

/// A response: status, content type, body (floe-control's listener writes it; its own routes
/// answer in the same shape).
pub type Reply = (StatusCode, &'static str, String);

/// A JSON reply.
pub fn json_reply(code: StatusCode, v: &Value) -> Reply {
    (code, "application/json", v.to_string())
}

/// A JSON error reply: `{"error": msg}`.
pub fn error(code: StatusCode, msg: impl std::fmt::Display) -> Reply {
    json_reply(code, &json!({"error": msg.to_string()}))
}

fn store_down(e: super::queue::QueueError) -> Reply {
    error(StatusCode::SERVICE_UNAVAILABLE, e)
}

/// Routes a scheduler request (body already read and bounded).
pub async fn route(s: &Arc<Scheduler>, p: &Parts, body: Bytes) -> Reply {
    let path = p.uri.path();
    if let Some(hook) = path.strip_prefix("/hooks/") {
        return webhook(s, p, hook, body).await;
    }
    match (&p.method, path) {
        (&Method::POST, "/events") => ingest(s, p, body).await,
        (&Method::GET, "/runs") => runs(s, p).await,
        (&Method::POST, _) if path.starts_with("/deployments/") && path.ends_with("/dispatch") => {
            let name = &path["/deployments/".len()..path.len() - "/dispatch".len()];
            dispatch(s, name, &body).await
        }
        _ => error(StatusCode::NOT_FOUND, "no such route: /status, /metrics, /events, /hooks/<path>, /deployments/<name>/dispatch, /runs"),
    }
}

/// `POST /events`: one CloudEvent (structured or binary mode), or a batch
/// (`application/cloudevents-batch+json`), fanned out to the subscribed deployments.
async fn ingest(s: &Arc<Scheduler>, p: &Parts, body: Bytes) -> Reply {
    let kind = p
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let events: Vec<Event> = if kind.starts_with("application/cloudevents-batch+json") {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("not a CloudEvents batch: {e}"),
                )
            }
        }
    } else {
        match cloudevents::binding::http::to_event(&p.headers, body.to_vec()) {
            Ok(e) => vec![json_data(e)],
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("not a CloudEvent: {e}")),
        }
    };
    // A batch is taken whole or not at all.
    if let Some(why) = events.iter().find_map(super::event::invalid) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let mut jobs = Vec::new();
    for e in &events {
        match s.submit(e, "event").await {
            Ok(ids) => jobs.extend(ids),
            Err(e) => return store_down(e),
        }
    }
    json_reply(
        StatusCode::ACCEPTED,
        &json!({"events": events.len(), "jobs": jobs}),
    )
}

/// A binary-mode event whose content type is JSON carries its data as JSON (the JSON event
/// format's `data`, not `data_base64`), as the structured mode would.
fn json_data(mut e: Event) -> Event {
    use cloudevents::{AttributesReader, Data};
    let Some(kind) = e.datacontenttype().map(str::to_owned) else {
        return e;
    };
    let base = kind.split(';').next().unwrap_or("").trim();
    if !(base == "application/json" || base.ends_with("+json")) {
        return e;
    }
    if let Some(Data::Binary(b)) = e.data() {
        if let Ok(v) = serde_json::from_slice::<Value>(b) {
            e.set_data(kind, v);
        }
    }
    e
}

/// Why a webhook's signature is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Unsigned {
    /// Missing, malformed, or not the HMAC of what came.
    Wrong,
    /// Signed with a timestamp too far from now (a replay, or a skewed clock).
    Stale,
}

/// Checks `x-floe-signature` in constant time: `sha256=<hex HMAC-SHA256(secret, body)>`, or
/// `t=<unix seconds>,sha256=<hex HMAC-SHA256(secret, "<t>." + body)>` with `t` within
/// `tolerance` of `now_secs`.
pub fn signed(
    secret: &[u8],
    header: Option<&str>,
    body: &[u8],
    tolerance: std::time::Duration,
    now_secs: i64,
) -> Result<(), Unsigned> {
    let header = header.ok_or(Unsigned::Wrong)?.trim();
    let (stamp, hexsig) = match header.strip_prefix("t=") {
        Some(rest) => {
            let (t, sig) = rest.split_once(',').ok_or(Unsigned::Wrong)?;
            let t: i64 = t.trim().parse().map_err(|_| Unsigned::Wrong)?;
            (
                Some(t),
                sig.trim().strip_prefix("sha256=").ok_or(Unsigned::Wrong)?,
            )
        }
        None => (None, header.strip_prefix("sha256=").ok_or(Unsigned::Wrong)?),
    };
    let sig = hex::decode(hexsig.trim()).map_err(|_| Unsigned::Wrong)?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).map_err(|_| Unsigned::Wrong)?;
    if let Some(t) = stamp {
        mac.update(format!("{t}.").as_bytes());
    }
    mac.update(body);
    mac.verify_slice(&sig).map_err(|_| Unsigned::Wrong)?;
    let window = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    match stamp {
        Some(t) if now_secs.abs_diff(t) > window.unsigned_abs() => Err(Unsigned::Stale),
        _ => Ok(()),
    }
}

/// A webhook: the whole request becomes the event's data.
async fn webhook(s: &Arc<Scheduler>, p: &Parts, hook: &str, body: Bytes) -> Reply {
    let Some((
        d,
        Trigger::Webhook {
            secret,
            methods,
            tolerance,
            ..
        },
    )) = s.hook(hook)
    else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no webhook trigger has path {hook:?}"),
        );
    };
    if !methods.iter().any(|m| m == p.method.as_str()) {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("webhook {hook:?} takes {}", methods.join(", ")),
        );
    }
    let header = |n: &str| p.headers.get(n).and_then(|v| v.to_str().ok());
    if let Some(secret) = secret {
        let now = chrono::Utc::now().timestamp();
        match signed(secret, header("x-floe-signature"), &body, *tolerance, now) {
            Ok(()) => {}
            Err(Unsigned::Wrong) => {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "x-floe-signature is missing or wrong",
                )
            }
            Err(Unsigned::Stale) => {
                return error(
                    StatusCode::UNAUTHORIZED,
                    format!(
                        "x-floe-signature's t= is more than {} s from now",
                        tolerance.as_secs()
                    ),
                )
            }
        }
    }
    let headers: serde_json::Map<String, Value> = p
        .headers
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "authorization" | "cookie" | "x-floe-signature"))
        .map(|(k, v)| {
            (
                k.to_string(),
                Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        })
        .collect();
    let mut data = json!({"method": p.method.as_str(), "path": p.uri.path(),
        "query": p.uri.query().unwrap_or(""), "headers": headers});
    match std::str::from_utf8(&body) {
        Ok(t) => data["body"] = Value::String(t.to_owned()),
        Err(_) => {
            use base64::Engine;
            data["body_base64"] =
                Value::String(base64::engine::general_purpose::STANDARD.encode(&body));
        }
    }
    let id = header("idempotency-key")
        .or(header("x-request-id"))
        .map(str::to_owned);
    let e = match event::webhook(hook, id, data) {
        Ok(e) => e,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match s.submit_to(d, "webhook", &e).await {
        Ok(job) => json_reply(StatusCode::ACCEPTED, &json!({"job": job})),
        Err(e) => store_down(e),
    }
}

/// `POST /deployments/<name>/dispatch`: one run by hand (a JSON body becomes the data).
async fn dispatch(s: &Arc<Scheduler>, name: &str, body: &[u8]) -> Reply {
    let Some(d) = s.deployment(name) else {
        return error(StatusCode::NOT_FOUND, format!("no deployment {name:?}"));
    };
    let data = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")),
        }
    };
    let e = match event::manual(d, data) {
        Ok(e) => e,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match s.submit_to(d, "manual", &e).await {
        Ok(job) => json_reply(StatusCode::ACCEPTED, &json!({"job": job})),
        Err(e) => store_down(e),
    }
}

/// `GET /runs[?deployment=D][&limit=N]`: run records, newest first.
async fn runs(s: &Arc<Scheduler>, p: &Parts) -> Reply {
    let q: Vec<(String, String)> =
        url::form_urlencoded::parse(p.uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let limit = get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(100_i64)
        .clamp(1, 10_000);
    match s.queue.runs(get("deployment"), limit).await {
        Ok(r) => json_reply(StatusCode::OK, &json!(r)),
        Err(e) => store_down(e),
    }
}

/// The scheduler's metrics: its counters, and the queue's depth read at scrape time.
pub async fn metric_families(s: &Scheduler) -> Vec<prometheus::proto::MetricFamily> {
    use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
    let mut families = s.metrics.registry.gather();
    let reg = Registry::new();
    if let (Ok(d), Ok(g)) = (
        s.queue.depth().await,
        IntGaugeVec::new(
            Opts::new("floe_sched_queue_jobs", "Jobs in the queue by state"),
            &["state"],
        ),
    ) {
        for (state, n) in [
            ("ready", d.ready),
            ("running", d.running),
            ("done", d.done),
            ("failed", d.failed),
        ] {
            g.with_label_values(&[state]).set(n);
        }
        let _ = reg.register(Box::new(g));
    }
    if let Ok(g) = IntGauge::new(
        "floe_sched_running_runs",
        "Worker runs under way on this instance",
    ) {
        g.set(i64::try_from(s.running_count()).unwrap_or(0));
        let _ = reg.register(Box::new(g));
    }
    families.extend(reg.gather());
    families
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hmac_hex(secret: &[u8], parts: &[&[u8]]) -> String {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
        for p in parts {
            mac.update(p);
        }
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn a_signature_holds_for_its_body_and_a_timestamped_one_only_within_the_tolerance() {
        let (secret, body, window) = (
            b"s".as_slice(),
            b"payload".as_slice(),
            Duration::from_secs(300),
        );
        let plain = format!("sha256={}", hmac_hex(secret, &[body]));
        assert_eq!(signed(secret, Some(&plain), body, window, 0), Ok(()));
        assert_eq!(
            signed(secret, Some(&plain), b"other", window, 0),
            Err(Unsigned::Wrong)
        );
        assert_eq!(signed(secret, None, body, window, 0), Err(Unsigned::Wrong));
        let t = 1_800_000_000_i64;
        let stamped = format!(
            "t={t},sha256={}",
            hmac_hex(secret, &[format!("{t}.").as_bytes(), body])
        );
        assert_eq!(
            signed(secret, Some(&stamped), body, window, t + 300),
            Ok(())
        );
        assert_eq!(
            signed(secret, Some(&stamped), body, window, t - 300),
            Ok(())
        );
        assert_eq!(
            signed(secret, Some(&stamped), body, window, t + 301),
            Err(Unsigned::Stale)
        );
        // The timestamp is signed: moving it breaks the signature.
        let moved = stamped.replacen(&t.to_string(), &(t + 1000).to_string(), 1);
        assert_eq!(
            signed(secret, Some(&moved), body, window, t + 1000),
            Err(Unsigned::Wrong)
        );
        for junk in [
            "t=,sha256=00",
            "t=1",
            "t=x,sha256=00",
            "sha256=zz",
            "md5=00",
        ] {
            assert_eq!(
                signed(secret, Some(junk), body, window, t),
                Err(Unsigned::Wrong),
                "{junk}"
            );
        }
    }
}
