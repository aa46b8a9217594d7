//! The data plane assembled: from validated [`Settings`] to a Pingora [`Server`] with every
//! listener and service added. `main.rs` runs it; the integration tests in `proxy/tests/` run
//! it in-process against an in-process origin.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::config::settings::{OriginPlace, Settings};
use crate::ops::{admin, metrics, otel, probes, reload};
use crate::origin::{embedded, Origin};
use crate::routes::RouteTable;
use crate::{catalog, chain, service};

/// The route table's origins by name; an embedded origin is started here.
pub fn build_origins(settings: &Settings) -> anyhow::Result<HashMap<String, Arc<Origin>>> {
    let mut origins = HashMap::new();
    for (name, spec) in &settings.origins {
        let origin = match &spec.place {
            OriginPlace::Remote(url) => Origin::new(spec, url),
            OriginPlace::Embedded(root) => {
                let buckets: Vec<String> = settings
                    .routes
                    .iter()
                    .filter(|r| &r.origin == name)
                    .filter_map(|r| r.bucket.name().map(|n| n.to_string()))
                    .collect();
                let e = embedded::start(root, &buckets)?;
                tracing::info!(origin = %name, addr = %e.addr, root = %root, "embedded origin started");
                let mut spec = spec.clone();
                spec.credentials = Some((e.access_key, e.secret_key));
                let url = url::Url::parse(&format!("http://{}", e.addr))?;
                Origin::new(&spec, &url)
            }
        };
        origins.insert(name.clone(), Arc::new(origin));
    }
    Ok(origins)
}

/// Builds the whole data plane from validated settings: embedded origins started, plugins
/// started, the route table, the S3 and admin listeners, reload, background services and the
/// metrics listener, all added to a bootstrapped Pingora [`Server`]. The caller runs it
/// (`run_forever`). `path` is the config file hot reload reads again; `upgrade` takes the
/// listening sockets over from a running floe-proxy.
pub fn build(mut settings: Settings, path: PathBuf, upgrade: bool) -> anyhow::Result<Server> {
    if let Some(endpoint) = &settings.server.otlp_endpoint {
        otel::init(endpoint, &settings.node_id)?;
        tracing::info!(endpoint = %endpoint, "exporting traces and metrics over OTLP");
    }
    let origins = build_origins(&settings)?;
    let configured = std::mem::take(&mut settings.plugins);
    let plugins = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the plugin start-up runtime")?
        .block_on(chain::start(configured))
        .map_err(|e| anyhow::anyhow!(e))?;
    let s = &settings.server;
    let table = RouteTable::new(
        &settings.routes,
        &origins,
        &plugins,
        &s.region,
        &s.hostnames,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let table = Arc::new(arc_swap::ArcSwap::from_pointee(table));
    let reloader = reload::Reloader::new(
        path,
        table.clone(),
        plugins.clone(),
        origins.clone(),
        s.reload_watch,
    );
    let catalog = settings
        .catalog
        .clone()
        .map(|c| Arc::new(catalog::CatalogRoute::new(c)));
    let conf = ServerConf {
        threads: s.threads,
        upgrade_sock: s.upgrade_sock.clone(),
        grace_period_seconds: Some(s.grace_period_seconds),
        graceful_shutdown_timeout_seconds: Some(5),
        ..Default::default()
    };
    // `--upgrade`: take the listening sockets over from the running floe-proxy (which is then
    // sent SIGQUIT and drains its transfers within grace_period_seconds).
    let opt = pingora::server::configuration::Opt {
        upgrade,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(Some(opt), conf);
    server.bootstrap();
    let mut proxy = pingora::proxy::http_proxy_service_with_name(
        &server.configuration,
        service::FloeProxy::new(table, catalog.clone()),
        "floe-s3",
    );
    // Pingora's default read buffer, and a write buffer a small response fits in whole.
    let buffers = L4BufferSettings::default().write(s.write_buffer_bytes);
    for l in &s.listeners {
        let endpoint = match &l.tls {
            None => ListenerConfig::tcp(&l.address),
            Some((cert, key)) => ListenerConfig::tcp(&l.address).tls(
                TlsSettings::intermediate(cert, key).with_context(|| {
                    format!("TLS listener {}: cert {cert}, key {key}", l.address)
                })?,
            ),
        };
        proxy.add_listener(endpoint.l4_buffer(buffers));
        tracing::info!(address = %l.address, tls = l.tls.is_some(), "listening");
    }
    if let Some(spec) = &settings.admin {
        let app = admin::AdminApp::new(spec.token.clone(), plugins.admin(), catalog);
        let mut a = Service::new("floe-admin".to_owned(), app);
        let addr = &spec.address;
        match &spec.tls {
            None => a.add_tcp(addr),
            Some((cert, key)) => a
                .add_tls(addr, cert, key)
                .with_context(|| format!("admin TLS listener {addr}: cert {cert}, key {key}"))?,
        }
        server.add_service(a);
        tracing::info!(address = %addr, tls = spec.tls.is_some(), "admin API listening");
    }
    server.add_service(proxy);
    server.add_service(background_service("floe-reload", reloader));
    for service in plugins.background() {
        server.add_boxed_service(service);
    }
    let gate = plugins.clone();
    probes::gate(Box::new(move || gate.not_ready()));
    if let Some(addr) = &s.metrics_address {
        let mut m = Service::new("floe-metrics".to_owned(), metrics::MetricsApp);
        m.add_tcp(addr);
        server.add_service(m);
        server.add_service(background_service(
            "floe-readiness",
            probes::LeaveOnShutdown,
        ));
    }
    Ok(server)
}
