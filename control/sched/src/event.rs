//! The CloudEvents 1.0 envelopes every dispatch carries (cloudevents-sdk), their deterministic
//! job ids, and subscription matching.

use chrono::{TimeZone, Utc};
use cloudevents::{AttributesReader, Event, EventBuilder, EventBuilderV10};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::config::{Deployment, Trigger};
use super::cron::{Interval, Schedule};

/// Type of a cron dispatch.
pub const CRON_TYPE: &str = "dev.floe.scheduler.cron";
/// Type of a webhook request.
pub const WEBHOOK_TYPE: &str = "dev.floe.webhook.request";
/// Type of a dispatch by hand.
pub const MANUAL_TYPE: &str = "dev.floe.scheduler.manual";
/// Type the catalog watcher emits per commit.
pub const COMMIT_TYPE: &str = "org.apache.iceberg.snapshot.committed";

/// A random event id (128 bits, hex).
pub fn random_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// An event the CloudEvents SDK refused to build.
#[derive(Debug, thiserror::Error)]
#[error("not a valid CloudEvent: {0}")]
pub struct EventError(#[from] cloudevents::event::EventBuilderError);

fn build(b: EventBuilderV10) -> Result<Event, EventError> {
    Ok(b.build()?)
}

/// A cron interval's event: id is the logical date, so its job id is deployment + date.
pub fn cron(
    d: &Deployment,
    trigger: usize,
    s: &Schedule,
    iv: Interval,
) -> Result<Event, EventError> {
    let (start, end) = (Schedule::rfc3339(iv.start), Schedule::rfc3339(iv.end));
    let time = Utc
        .timestamp_millis_opt(iv.end)
        .single()
        .unwrap_or_else(Utc::now);
    build(
        EventBuilderV10::new()
            .id(start.clone())
            .source(format!(
                "/floe-control/deployments/{}/triggers/{trigger}",
                d.name
            ))
            .ty(CRON_TYPE)
            .time(time)
            .extension("logicaldate", start.clone())
            .extension("intervalstart", start.clone())
            .extension("intervalend", end.clone())
            .data(
                "application/json",
                serde_json::json!({"logical_date": start, "interval_start": start,
                    "interval_end": end, "schedule": s.pattern}),
            ),
    )
}

/// A manual dispatch carrying `data`.
pub fn manual(d: &Deployment, data: Value) -> Result<Event, EventError> {
    build(
        EventBuilderV10::new()
            .id(random_id())
            .source(format!("/floe-control/deployments/{}/dispatch", d.name))
            .ty(MANUAL_TYPE)
            .time(Utc::now())
            .data("application/json", data),
    )
}

/// A webhook request turned into an event: the request's own `idempotency-key` or
/// `x-request-id` is its id when it has one (a sender's retry is one run), else a random one.
pub fn webhook(path: &str, id: Option<String>, data: Value) -> Result<Event, EventError> {
    build(
        EventBuilderV10::new()
            .id(id.unwrap_or_else(random_id))
            .source(format!("/hooks/{path}"))
            .ty(WEBHOOK_TYPE)
            .time(Utc::now())
            .data("application/json", data),
    )
}

/// The event of one Iceberg commit the watcher saw.
pub fn commit(catalog: &str, table: &str, snapshot: i64, data: Value) -> Result<Event, EventError> {
    build(
        EventBuilderV10::new()
            .id(format!("{table}@{snapshot}"))
            .source(catalog)
            .ty(COMMIT_TYPE)
            .subject(table)
            .time(Utc::now())
            .data("application/json", data),
    )
}

/// Why `e` breaks the CloudEvents 1.0 spec where the SDK lets it through, if it does: `id`,
/// `source` and `type` must be non-empty strings, and `subject` too when present. An empty `id`
/// would also make every such event from one source a duplicate of the first.
pub fn invalid(e: &Event) -> Option<String> {
    let empty = [
        ("id", e.id().is_empty()),
        ("source", e.source().as_str().is_empty()),
        ("type", e.ty().is_empty()),
        ("subject", e.subject().is_some_and(str::is_empty)),
    ];
    let named: Vec<&str> = empty.iter().filter(|(_, v)| *v).map(|(n, _)| *n).collect();
    (!named.is_empty()).then(|| {
        format!(
            "CloudEvents attributes must be non-empty strings: {} {} empty",
            named.join(", "),
            if named.len() == 1 { "is" } else { "are" }
        )
    })
}

/// The job id of `event` for deployment `d`: deterministic in (deployment, source, id).
pub fn job_id(deployment: &str, e: &Event) -> String {
    let mut h = Sha256::new();
    for part in [deployment, e.source().as_str(), e.id()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    format!("{deployment}/{}", &hex::encode(h.finalize())[..32])
}

/// Whether a subscription takes `e`: exact type, and source and subject when given.
pub fn matches(t: &Trigger, e: &Event) -> bool {
    match t {
        Trigger::Event {
            ty,
            source,
            subject,
        } => {
            ty == e.ty()
                && source.as_deref().is_none_or(|s| s == e.source().as_str())
                && subject.as_deref().is_none_or(|s| Some(s) == e.subject())
        }
        _ => false,
    }
}

/// The deployments subscribed to `e`.
pub fn subscribers<'a>(ds: &'a [Deployment], e: &'a Event) -> impl Iterator<Item = &'a Deployment> {
    ds.iter()
        .filter(move |d| d.triggers.iter().any(|t| matches(t, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(triggers: Vec<Trigger>) -> Deployment {
        Deployment {
            name: "d".into(),
            command: "true".into(),
            args: vec![],
            dir: None,
            triggers,
            output_tables: vec![],
            env: Default::default(),
            time_limit: std::time::Duration::from_secs(1),
            stop_grace: std::time::Duration::from_secs(1),
            max_attempts: 1,
            backoff: std::time::Duration::from_secs(1),
        }
    }

    #[test]
    fn subscriptions_match_exact_type_and_the_attributes_they_name() {
        let e = commit("http://cat", "db.t", 7, serde_json::json!({})).unwrap();
        let sub = |ty: &str, source: Option<&str>, subject: Option<&str>| Trigger::Event {
            ty: ty.into(),
            source: source.map(Into::into),
            subject: subject.map(Into::into),
        };
        assert!(matches(&sub(COMMIT_TYPE, None, None), &e));
        assert!(matches(
            &sub(COMMIT_TYPE, Some("http://cat"), Some("db.t")),
            &e
        ));
        assert!(!matches(&sub(COMMIT_TYPE, None, Some("db.u")), &e));
        assert!(!matches(&sub("org.apache.iceberg", None, None), &e));
        assert_eq!(
            subscribers(&[dep(vec![sub(COMMIT_TYPE, None, None)])], &e).count(),
            1
        );
    }

    #[test]
    fn job_ids_are_deterministic_per_deployment_source_and_id() {
        let a = commit("http://cat", "db.t", 7, serde_json::json!({"x": 1})).unwrap();
        let b = commit("http://cat", "db.t", 7, serde_json::json!({"x": 2})).unwrap();
        let c = commit("http://cat", "db.t", 8, serde_json::json!({})).unwrap();
        assert_eq!(job_id("d", &a), job_id("d", &b));
        assert_ne!(job_id("d", &a), job_id("d", &c));
        assert_ne!(job_id("d", &a), job_id("e", &a));
    }

    #[test]
    fn empty_required_attributes_are_refused_by_name() {
        let event = |v: Value| serde_json::from_value::<Event>(v).unwrap();
        let base =
            serde_json::json!({"specversion": "1.0", "id": "1", "source": "/s", "type": "t"});
        assert_eq!(invalid(&event(base.clone())), None);
        for (field, value) in [("id", ""), ("source", ""), ("type", ""), ("subject", "")] {
            let mut v = base.clone();
            v[field] = Value::from(value);
            let why = invalid(&event(v));
            assert!(
                why.as_deref().is_some_and(|w| w.contains(field)),
                "{field}: {why:?}"
            );
        }
        let mut two = base;
        two["id"] = Value::from("");
        two["type"] = Value::from("");
        assert_eq!(
            invalid(&event(two)).as_deref(),
            Some("CloudEvents attributes must be non-empty strings: id, type are empty")
        );
    }
}
