//! The watcher: polls the REST catalog (iceberg-catalog-rest; read-only calls) and hands every
//! observed commit (the metadata location changed) to the warmer. Catalog errors back off
//! exponentially and show in the worker state; the proxies keep serving meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableIdent};
use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};
use tokio::sync::mpsc;

use crate::error::ControlError;
use crate::state::{Control, WarmPhase};
use crate::storage::FloeStorageFactory;
use crate::warmer::Commit;
use floe_core::worker::{pause, Activity, Handle, Shutdown};

/// Longest back-off after repeated catalog failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Builds the catalog client; its FileIO reads through the first node.
pub async fn catalog(ctl: &Control) -> Result<RestCatalog, ControlError> {
    let nodes = ctl.nodes.current();
    let node = ctl
        .placement
        .reader(&nodes)
        .ok_or(ControlError::NoNodes)?
        .node();
    RestCatalogBuilder::default()
        .with_client(crate::http::shared())
        .with_storage_factory(Arc::new(FloeStorageFactory::new(node)))
        .load("floe", ctl.settings.catalog_props.iter().cloned().collect())
        .await
        .map_err(ControlError::iceberg("catalog client"))
}

/// The tables to follow right now: the configured ones, or every table of the configured (or
/// all top-level) namespaces.
async fn followed(ctl: &Control, cat: &RestCatalog) -> iceberg::Result<Vec<TableIdent>> {
    let mut spaces = Vec::new();
    if ctl.settings.follow.is_empty() {
        spaces = cat
            .list_namespaces(None)
            .await?
            .into_iter()
            .map(|n| (n, Vec::new()))
            .collect();
    } else {
        for (ns, tables) in &ctl.settings.follow {
            spaces.push((NamespaceIdent::from_strs(ns)?, tables.clone()));
        }
    }
    let mut out = Vec::new();
    for (ns, tables) in spaces {
        if tables.is_empty() {
            out.extend(cat.list_tables(&ns).await?);
        } else {
            out.extend(tables.into_iter().map(|t| TableIdent::new(ns.clone(), t)));
        }
    }
    Ok(out)
}

fn name_of(t: &TableIdent) -> String {
    format!("{}.{}", t.namespace().join("."), t.name())
}

/// One poll: loads every followed table and sends the changed ones on.
async fn poll(
    ctl: &Control,
    cat: &RestCatalog,
    seen: &mut HashMap<String, String>,
    tx: &mpsc::Sender<Commit>,
) -> iceberg::Result<()> {
    for ident in followed(ctl, cat).await? {
        let table = cat.load_table(&ident).await?;
        let name = name_of(&ident);
        let location = table.metadata_location().unwrap_or_default().to_owned();
        if seen.get(&name) == Some(&location) {
            continue;
        }
        // The proxies' catalog routes forget their cached loadTable of this namespace first, so
        // once the status shows the new snapshot, so does the route.
        let ns = ident.namespace().join(".");
        for n in ctl.nodes.current().iter() {
            if let Err(e) = n.purge_catalog(&ns).await {
                tracing::warn!(node = n.url(), namespace = %ns, error = %e, "catalog purge failed twice");
            }
        }
        let snapshot = table.metadata().current_snapshot_id();
        ctl.table(&name, |t| {
            t.metadata_location = location.clone();
            t.snapshot_id = snapshot;
            t.commits += 1;
            t.warm.phase = WarmPhase::Pending;
        });
        if let (Some(s), Some(snap)) = (ctl.sched.get(), table.metadata().current_snapshot()) {
            emit(ctl, s, &name, &location, snap).await;
        }
        seen.insert(name.clone(), location);
        if tx.send(Commit { name, table }).await.is_err() {
            break;
        }
    }
    Ok(())
}

/// Hands the scheduler `org.apache.iceberg.snapshot.committed` for a commit (source: the
/// catalog; subject: the table; id: table@snapshot, so seeing it again after a restart is the
/// same event). A failure to persist it is logged; the next commit is unaffected.
async fn emit(
    ctl: &Control,
    s: &floe_sched::Scheduler,
    table: &str,
    location: &str,
    snap: &iceberg::spec::Snapshot,
) {
    let summary = snap.summary();
    let data = serde_json::json!({
        "table": table,
        "snapshot_id": snap.snapshot_id(),
        "parent_snapshot_id": snap.parent_snapshot_id(),
        "operation": format!("{:?}", summary.operation).to_lowercase(),
        "summary": summary.additional_properties,
        "metadata_location": location,
        "timestamp_ms": snap.timestamp_ms(),
    });
    let catalog = ctl
        .settings
        .catalog_props
        .first()
        .map(|p| p.1.as_str())
        .unwrap_or("");
    let r = floe_sched::event::commit(catalog, table, snap.snapshot_id(), data)
        .map_err(|e| floe_sched::queue::QueueError(e.to_string()));
    match r {
        Ok(e) => {
            if let Err(e) = s.submit(&e, "event").await {
                tracing::warn!(table, error = %e, "commit event not persisted");
            }
        }
        Err(e) => tracing::warn!(table, error = %e, "commit event not built"),
    }
}

/// Runs the watcher until shutdown.
pub async fn run(ctl: Arc<Control>, h: Handle, tx: mpsc::Sender<Commit>, mut stop: Shutdown) {
    let mut seen = HashMap::new();
    let mut backoff = ctl.settings.poll;
    let mut cat = None;
    loop {
        h.set(Activity::Working, "polling the catalog");
        if cat.is_none() {
            match catalog(&ctl).await {
                Ok(c) => cat = Some(c),
                Err(e) => h.error(floe_core::chain(&e)),
            }
        }
        let result = match &cat {
            Some(c) => poll(&ctl, c, &mut seen, &tx)
                .await
                .map_err(|e| crate::http::chain(&e)),
            None => Err("no catalog client".into()),
        };
        let wait = match result {
            Ok(()) => {
                h.done();
                backoff = ctl.settings.poll;
                ctl.settings.poll
            }
            Err(e) => {
                h.error(format!("catalog: {e}"));
                h.set(
                    Activity::Backoff,
                    format!("retrying in {} ms", backoff.as_millis()),
                );
                let w = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                w
            }
        };
        if pause(&mut stop, wait).await {
            return;
        }
    }
}
