//! The pins API on floe-control's listener: `GET /pins` lists them with their state;
//! `POST /pins?table=T[&partition=SPEC][&columns=a,b]` pins (201; 200 when already pinned; 404 for a table
//! not followed; 409 when a node's bound refuses it, nothing changed); `DELETE /pins` with the same
//! parameters unpins (200; 404 when no such pin). `floe-control pin` and the console's
//! buttons call these.

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::json;

use super::keeper::{send_or_refuse, warm};
use super::{added, current, Pin, PinPhase};
use crate::api::{error, json_reply, Reply};
use crate::state::Control;

/// Answers a `/pins` request; `None` for another method.
pub async fn route(ctl: &Arc<Control>, method: &hyper::Method, query: Option<&str>) -> Reply {
    match *method {
        hyper::Method::GET => json_reply(StatusCode::OK, &json!({"pins": ctl.pins.views()})),
        hyper::Method::POST | hyper::Method::DELETE => {
            let pin = match parse(query) {
                Ok(p) => p,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            if *method == hyper::Method::POST {
                pin_table(ctl, pin).await
            } else {
                unpin(ctl, pin).await
            }
        }
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "GET, POST or DELETE /pins"),
    }
}

/// The pin a query names.
pub fn parse(query: Option<&str>) -> Result<Pin, String> {
    let (mut table, mut partition, mut columns) = (None, None, None);
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "table" => table = Some(v.into_owned()),
            "partition" if !v.is_empty() => partition = Some(v.into_owned()),
            "partition" => {}
            "columns" => {
                let list: Vec<String> = v
                    .split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect();
                columns = (!list.is_empty()).then_some(list);
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?} (table, partition, columns)"
                ))
            }
        }
    }
    let table = table
        .filter(|t| !t.is_empty())
        .ok_or("table= is required (namespace.table)")?;
    Ok(Pin {
        table,
        partition,
        columns,
    })
}

async fn pin_table(ctl: &Arc<Control>, pin: Pin) -> Reply {
    if !ctl.tables().contains_key(&pin.table) {
        return error(
            StatusCode::NOT_FOUND,
            format!("{} is not a followed table", pin.table),
        );
    }
    if ctl.pins.contains(&pin) {
        return json_reply(StatusCode::OK, &json!({"pin": pin, "created": false}));
    }
    let mut pins = ctl.pins.pins();
    let (before, _) = current(ctl, &pins);
    pins.push(pin.clone());
    let (sets, counts) = current(ctl, &pins);
    {
        let mut told = ctl.told.lock().await;
        let nodes = ctl.nodes.current();
        if let Err(r) = send_or_refuse(&mut told, &nodes, &sets).await {
            return error(
                StatusCode::CONFLICT,
                format!(
                    "pinning {} would pass a node's bound, so nothing was pinned: {}",
                    pin.table, r.why
                ),
            );
        }
        if let Err(e) = ctl.pins.add(pin.clone()) {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pins not saved: {e}"),
            );
        }
    }
    let (files, bytes) = counts.last().copied().unwrap_or_default();
    ctl.pins.update(&pin, |v| {
        (v.files, v.bytes) = (files, bytes);
        v.phase = if files == 0 {
            PinPhase::Pending
        } else {
            PinPhase::Warming
        };
    });
    let fresh = added(&sets, &before);
    let warming = ctl.clone();
    tokio::spawn(async move { warm(&warming, &fresh).await });
    json_reply(
        StatusCode::CREATED,
        &json!({"pin": pin, "created": true, "files": files, "bytes": bytes}),
    )
}

async fn unpin(ctl: &Arc<Control>, pin: Pin) -> Reply {
    let mut told = ctl.told.lock().await;
    match ctl.pins.remove(&pin) {
        Ok(true) => {}
        Ok(false) => return error(StatusCode::NOT_FOUND, format!("no pin of {}", pin.table)),
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pins not saved: {e}"),
            )
        }
    }
    let (sets, _) = current(ctl, &ctl.pins.pins());
    // Smaller sets are never refused; a node that does not answer gets them next poll.
    let _ = send_or_refuse(&mut told, &ctl.nodes.current(), &sets).await;
    json_reply(StatusCode::OK, &json!({"pin": pin, "removed": true}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_name_a_table_and_maybe_partitions() {
        assert_eq!(
            parse(Some("table=db.t&partition=d%3D1")).unwrap(),
            Pin {
                table: "db.t".into(),
                partition: Some("d=1".into()),
                columns: None,
            }
        );
        assert_eq!(
            parse(Some("table=db.t&columns=a,%20b.c,")).unwrap().columns,
            Some(vec!["a".to_owned(), "b.c".to_owned()])
        );
        assert_eq!(
            parse(Some("table=db.t&partition=")).unwrap().partition,
            None
        );
        assert!(parse(Some("partition=d=1")).is_err());
        assert!(parse(Some("table=db.t&rows=a"))
            .unwrap_err()
            .contains("columns"));
        assert!(parse(None).is_err());
    }
}
