//! Adding a filter: a toy plugin joins the chain in one place (the factory list) and its stage
//! runs in a route's chain, in the order the route lists it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::config::{ConfigCx, ConfigError};
use floe_core::{S3Error, S3Op};
use floe_filter::plugin::{
    AdminHandler, AdminRequest, AdminResponse, Configured, Plugin, PluginFactory, RouteCx,
    StartError,
};
use floe_filter::{FilterCtx, RequestFilter};

use super::*;
use crate::config::settings::parse_with;

/// Counts the request-body bytes of every route it is on and rejects bodies over a limit.
struct Toy {
    seen: Arc<AtomicU64>,
}

#[async_trait]
impl RequestFilter for Toy {
    fn name(&self) -> &'static str {
        "toy"
    }

    async fn request_body_filter(
        &self,
        body: &mut Option<Bytes>,
        _end: bool,
        _ctx: &mut FilterCtx,
    ) -> Result<(), S3Error> {
        let n = body.as_ref().map_or(0, |b| b.len() as u64);
        if self.seen.fetch_add(n, Ordering::Relaxed) + n > 10 {
            return Err(S3Error::new(
                floe_core::S3ErrorCode::EntityTooLarge,
                "toy limit",
            ));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct ToyConfig;

struct ToyPlugin {
    seen: Arc<AtomicU64>,
}

struct ToyAdmin;

#[async_trait]
impl AdminHandler for ToyAdmin {
    async fn handle(&self, req: &AdminRequest) -> Option<AdminResponse> {
        (req.path == "/toy").then(|| AdminResponse::json(200, serde_json::json!({"toy": true})))
    }
}

impl Plugin for ToyPlugin {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn build(&self, _route: &RouteCx<'_>) -> Result<Arc<dyn RequestFilter>, StartError> {
        Ok(Arc::new(Toy {
            seen: self.seen.clone(),
        }))
    }

    fn admin(&self) -> Option<Arc<dyn AdminHandler>> {
        Some(Arc::new(ToyAdmin))
    }
}

#[async_trait]
impl Configured for ToyConfig {
    async fn start(self: Box<Self>) -> Result<Arc<dyn Plugin>, StartError> {
        Ok(Arc::new(ToyPlugin {
            seen: Arc::default(),
        }))
    }
}

struct ToyFactory;

impl PluginFactory for ToyFactory {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn configure(&self, _cx: &ConfigCx<'_>, _t: &str) -> Result<Box<dyn Configured>, ConfigError> {
        Ok(Box::new(ToyConfig))
    }
}

static TOY: ToyFactory = ToyFactory;

const YAML: &str = "server:\n  listeners: [{address: '127.0.0.1:1'}]\norigins:\n  o:\n    endpoint: http://127.0.0.1:1\nroutes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n    filters: [sigv4, toy]\n";

/// The route table of `yaml` (its one origin named `o`) and its started plugins.
async fn table_of(
    yaml: &str,
    factories: &[&'static dyn PluginFactory],
) -> (crate::routes::RouteTable, Plugins) {
    let env = |_: &str| None;
    let mut s = parse_with("t.yaml", yaml, &env, factories).unwrap();
    let plugins = start(std::mem::take(&mut s.plugins)).await.unwrap();
    let origins = std::collections::HashMap::from([(
        "o".to_owned(),
        Arc::new(crate::origin::Origin::new(
            &s.origins["o"],
            &url::Url::parse("http://127.0.0.1:1").unwrap(),
        )),
    )]);
    let table =
        crate::routes::RouteTable::new(&s.routes, &origins, &plugins, "us-east-1", &[]).unwrap();
    (table, plugins)
}

#[tokio::test]
async fn a_toy_filter_joins_the_chain_in_one_place() {
    // The one line: the toy factory beside the chain's own.
    let mut factories = factories();
    factories.push(&TOY);
    let (table, plugins) = table_of(YAML, &factories).await;
    let route = table.get("abc").unwrap().unwrap();
    let names: Vec<&str> = route.filters.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["sigv4", "toy"]);
    // Its hooks run with the route's requests: the body hook sees the bytes and can refuse.
    let mut ctx = FilterCtx::new(S3Op::PutObject);
    let toy = &route.filters[1];
    toy.request_body_filter(&mut Some(Bytes::from_static(b"12345")), false, &mut ctx)
        .await
        .unwrap();
    let e = toy
        .request_body_filter(&mut Some(Bytes::from_static(b"678901")), true, &mut ctx)
        .await
        .unwrap_err();
    assert_eq!(e.code, floe_core::S3ErrorCode::EntityTooLarge);
    // And its admin endpoint joins the admin listener.
    let req = AdminRequest {
        method: "GET".into(),
        path: "/toy".into(),
        query: Default::default(),
        body: Bytes::new(),
    };
    let mut answered = None;
    for h in plugins.admin() {
        answered = answered.or(h.handle(&req).await);
    }
    assert_eq!(answered.map(|r| r.status), Some(200));
}

#[test]
fn an_unknown_filter_names_every_plugin() {
    let env = |_: &str| None;
    let e = parse_with("t.yaml", YAML, &env, &factories()).unwrap_err();
    assert_eq!(e.key, "routes[0].filters[1]");
    assert!(e.reason.contains("known: sigv4, ring, blocks"), "{e}");
}

#[test]
fn every_plugin_section_is_a_key_the_proxy_accepts() {
    for f in factories() {
        for section in f.sections() {
            let yaml = format!("{YAML}{section}: ~\n").replace("[sigv4, toy]", "[sigv4]");
            let env = |_: &str| None;
            let r = crate::config::settings::parse("t.yaml", &yaml, &env);
            assert!(
                r.as_ref().err().is_none_or(|e| e.key != "(yaml)"),
                "{section}: {:?}",
                r.err()
            );
        }
    }
}

const PATTERNS: &str = "server:\n  listeners: [{address: '127.0.0.1:1'}]\norigins:\n  o:\n    endpoint: http://127.0.0.1:1\nroutes:\n  - bucket: 'analytics-*'\n    origin: o\n    anonymous: true\n  - bucket: analytics-raw\n    origin: o\n    anonymous: true\n    bucket_operations: true\n  - bucket: 'analytics-?'\n    origin: o\n    anonymous: true\n    bucket_operations: true\n";

#[tokio::test]
async fn a_named_route_wins_over_patterns_and_the_first_pattern_over_later_ones() {
    let (table, _) = table_of(PATTERNS, &factories()).await;
    let raw = table.get("analytics-raw").unwrap().unwrap();
    assert!(
        raw.bucket_operations,
        "the named route, though a pattern comes first"
    );
    let x = table.get("analytics-x").unwrap().unwrap();
    assert_eq!(x.bucket.as_str(), "analytics-x");
    assert!(
        !x.bucket_operations,
        "the first matching pattern, not the later one"
    );
    let again = table.get("analytics-x").unwrap().unwrap();
    assert!(Arc::ptr_eq(&x, &again), "built once per bucket, then kept");
    assert!(table.get("warehouse").unwrap().is_none());
    assert!(
        table.get("analytics-NOPE").is_err(),
        "an invalid name matched is refused"
    );
}
