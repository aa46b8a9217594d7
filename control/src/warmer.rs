//! The warmer: for each observed commit, walks metadata.json, the manifest list, the manifests,
//! the delete files and the Parquet footers of the live data files into the proxies' metadata
//! stores, builds the table's file map, and pins the catalog's classification on the nodes.
//! Bounded concurrency, a shared byte rate, and a per-table budget: over budget it stops and says
//! so.

use std::sync::Arc;

use futures::{stream, StreamExt};
use iceberg::spec::{DataContentType, DataFileFormat, ManifestStatus, Operation, Struct};
use iceberg::table::Table;
use tokio::sync::mpsc;

use crate::error::ControlError;
use crate::mapper::FileKey;
use crate::node::{split_location, NodeClient, Span, Store};
use crate::state::{Control, WarmPhase};
use floe_core::worker::{Activity, Handle, Shutdown};

/// Delete files up to this size are warmed whole into the metadata store (engines read them
/// whole on every scan of their partition); larger ones are left to the data path.
const MAX_WHOLE_DELETES: u64 = 8 << 20;

/// A commit the watcher saw.
pub struct Commit {
    /// `namespace.table`.
    pub name: String,
    /// The table as loaded after the commit.
    pub table: Table,
}

/// A live data file of the current snapshot.
#[derive(Debug, Clone)]
pub struct LiveFile {
    /// Bucket and key.
    pub loc: FileKey,
    /// Rendered partition.
    pub partition: String,
    /// Size in bytes.
    pub size: u64,
    /// Added by the current snapshot.
    pub new: bool,
}

/// Work for the prefetcher: a replace commit's live files.
pub struct Replaced {
    /// `namespace.table`.
    pub name: String,
    /// The live files after the commit (the new ones flagged).
    pub live: Vec<LiveFile>,
}

/// Runs the warmer until shutdown; replace commits go on to the prefetcher.
pub async fn run(
    ctl: Arc<Control>,
    h: Handle,
    mut rx: mpsc::Receiver<Commit>,
    prefetch: mpsc::Sender<Replaced>,
    stop: Shutdown,
) {
    let mut quit = stop.clone();
    floe_core::worker::drain(&h, &mut rx, &mut quit, |c: Commit| {
        let (ctl, h, prefetch, stop) = (ctl.clone(), h.clone(), prefetch.clone(), stop.clone());
        async move {
            h.set(Activity::Working, c.name.clone());
            if let Err(e) = warm_commit(&ctl, &c, &prefetch, stop).await {
                ctl.table(&c.name, |t| {
                    t.warm.phase = WarmPhase::Failed;
                    t.warm.note = floe_core::chain(&e);
                });
                h.error(format!("{}: {}", c.name, floe_core::chain(&e)));
            }
        }
    })
    .await
}

fn loc(path: &str) -> Result<FileKey, ControlError> {
    split_location(path)
        .map(|(b, k)| (b.to_owned(), k.to_owned()))
        .ok_or_else(|| ControlError::Location(path.to_owned()))
}

/// Warms one commit; returns an error text when the walk could not finish.
pub async fn warm_commit(
    ctl: &Arc<Control>,
    c: &Commit,
    prefetch: &mpsc::Sender<Replaced>,
    stop: Shutdown,
) -> Result<(), ControlError> {
    let meta = c.table.metadata();
    let Some(snapshot) = meta.current_snapshot() else {
        ctl.table(&c.name, |t| t.warm.phase = WarmPhase::Warm);
        return Ok(());
    };
    let op = snapshot.summary().operation.clone();
    ctl.table(&c.name, |t| {
        t.warm = Default::default();
        t.warm.phase = WarmPhase::Warming;
        t.operation = format!("{op:?}").to_lowercase();
    });
    let mut metadata_keys = Vec::new();
    if let Some(m) = c.table.metadata_location() {
        let l = loc(m)?;
        warm_all(ctl, &c.name, &l, Span::Whole, Some(Store::Metadata)).await?;
        metadata_keys.push(l);
    }
    // The manifest list and manifests are read through node 0 (FloeStorage), which warms them
    // there; the other nodes warm them by key.
    let list = c
        .table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(ControlError::iceberg("manifest list"))?;
    let list_key = loc(snapshot.manifest_list())?;
    warm_others(ctl, &list_key, Span::Whole, Some(Store::Metadata)).await;
    metadata_keys.push(list_key);
    progress(ctl, &c.name, list.entries().len() as u64 + 2, 2, 0);
    let current = snapshot.snapshot_id();
    let manifests: Vec<_> = stream::iter(list.entries().iter().cloned())
        .map(|mf| {
            let io = c.table.file_io().clone();
            async move {
                let m = mf.load_manifest(&io).await;
                (mf.manifest_path.clone(), m)
            }
        })
        .buffer_unordered(ctl.settings.warm.concurrency)
        .collect()
        .await;
    let mut live = Vec::new();
    let mut deletes = Vec::new();
    for (path, m) in manifests {
        let m = m.map_err(ControlError::iceberg(format!("manifest {path}")))?;
        let l = loc(&path)?;
        warm_others(ctl, &l, Span::Whole, Some(Store::Metadata)).await;
        metadata_keys.push(l);
        progress(ctl, &c.name, 0, 1, 0);
        let names: Vec<String> = m
            .metadata()
            .partition_spec()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        for e in m.entries() {
            let f = e.data_file();
            if e.status() == ManifestStatus::Deleted {
                continue;
            }
            if f.content_type() != DataContentType::Data {
                // Position/equality deletes: every scan of their partition reads them whole.
                if f.file_size_in_bytes() <= MAX_WHOLE_DELETES {
                    deletes.push(loc(f.file_path())?);
                }
                continue;
            }
            if f.file_format() != DataFileFormat::Parquet {
                continue;
            }
            live.push(LiveFile {
                loc: loc(f.file_path())?,
                partition: render(&names, f.partition()),
                size: f.file_size_in_bytes(),
                new: e.status() == ManifestStatus::Added && e.snapshot_id() == Some(current),
            });
        }
    }
    for d in &deletes {
        warm_all(ctl, &c.name, d, Span::Whole, Some(Store::Metadata)).await?;
        progress(ctl, &c.name, 1, 1, 0);
        metadata_keys.push(d.clone());
    }
    pin(ctl, &metadata_keys, Store::Metadata).await;
    let data_keys: Vec<FileKey> = live.iter().map(|f| f.loc.clone()).collect();
    // Only files the nodes have not been told about at an earlier commit (bounded bodies).
    let told = ctl
        .live
        .lock()
        .ok()
        .and_then(|l| l.get(&c.name).cloned())
        .unwrap_or_default();
    let fresh: Vec<FileKey> = data_keys
        .iter()
        .filter(|k| !told.contains(*k))
        .cloned()
        .collect();
    pin(ctl, &fresh, Store::Data).await;
    ctl.table(&c.name, |t| {
        t.data_files = live.len() as u64;
        t.warm.total += live.len() as u64;
    });
    let mapped = crate::footer::footers(ctl, &c.name, &live).await;
    crate::hints::publish(ctl, &c.name, &mapped).await;
    ctl.files.publish_table(&c.name, mapped);
    if let Ok(mut p) = ctl.published.lock() {
        let told = crate::state::Published {
            metadata: metadata_keys,
            live: Arc::new(live.clone()),
        };
        p.insert(c.name.clone(), Arc::new(told));
    }
    let gone = crate::expiry::replaced(ctl, &c.name, data_keys.into_iter().collect());
    let grace = crate::expiry::grace(ctl, meta.properties());
    crate::expiry::schedule(ctl, &c.name, gone, grace, stop);
    if op == Operation::Replace && ctl.settings.prefetch.enabled {
        set_phase(ctl, &c.name, WarmPhase::Prefetching);
        let job = Replaced {
            name: c.name.clone(),
            live,
        };
        if prefetch.send(job).await.is_ok() {
            return Ok(()); // the prefetcher marks the table warm when it is done
        }
    }
    set_phase(ctl, &c.name, WarmPhase::Warm);
    Ok(())
}

/// Moves the table to `phase` unless warming stopped early (over budget keeps its note).
pub fn set_phase(ctl: &Control, table: &str, phase: WarmPhase) {
    ctl.table(table, |t| {
        if t.warm.phase != WarmPhase::OverBudget {
            t.warm.phase = phase;
        }
    });
}

pub(crate) fn progress(ctl: &Control, table: &str, total: u64, done: u64, bytes: u64) {
    ctl.table(table, |t| {
        t.warm.total += total;
        t.warm.done += done;
        t.warm.bytes += bytes;
    });
}

/// Warms one object on every node (node 0 included), under the rate limit.
async fn warm_all(
    ctl: &Control,
    table: &str,
    l: &FileKey,
    span: Span,
    store: Option<Store>,
) -> Result<(), ControlError> {
    let mut bytes = 0;
    let nodes = ctl.nodes.current();
    for n in ctl.placement.targets(&nodes, &l.0, &l.1) {
        bytes = n.warm(&l.0, &l.1, span, store).await?;
    }
    ctl.rate.acquire(bytes).await;
    progress(ctl, table, 0, 0, bytes);
    Ok(())
}

/// Warms one object on its nodes but the reader (which read it already); failures are logged.
pub(crate) async fn warm_others(ctl: &Control, l: &FileKey, span: Span, store: Option<Store>) {
    let nodes = ctl.nodes.current();
    let reader = ctl.placement.reader(&nodes).map(NodeClient::url);
    let targets = ctl.placement.targets(&nodes, &l.0, &l.1);
    for n in targets.into_iter().filter(|n| Some(n.url()) != reader) {
        if let Err(e) = n.warm(&l.0, &l.1, span, store).await {
            tracing::warn!(node = n.url(), key = %l.1, error = %e, "warm failed");
        }
    }
}

/// Sends the catalog's classification to every node, per bucket.
async fn pin(ctl: &Control, keys: &[FileKey], store: Store) {
    for n in ctl.nodes.current().iter() {
        classify_on(n, keys, store).await;
    }
}

/// Sends the classification of `keys` to `n`, per bucket; failures are logged (the node
/// classifies by its rules meanwhile).
pub(crate) async fn classify_on(n: &NodeClient, keys: &[FileKey], store: Store) {
    let mut by_bucket: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (b, k) in keys {
        by_bucket.entry(b).or_default().push(k.clone());
    }
    for (b, ks) in &by_bucket {
        if let Err(e) = n.classify(b, ks, store).await {
            tracing::warn!(node = n.url(), bucket = b, error = %e, "classify failed");
        }
    }
}

/// Renders a partition tuple as `name=value/...` (empty when unpartitioned).
pub fn render(names: &[String], p: &Struct) -> String {
    names
        .iter()
        .zip(p.iter())
        .map(|(n, v)| match v {
            Some(iceberg::spec::Literal::Primitive(x)) => {
                format!("{n}={}", bare(&format!("{x:?}")))
            }
            Some(other) => format!("{n}={other:?}"),
            None => format!("{n}=null"),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// `Int(3)` -> `3`, `String("a")` -> `"a"`: the value without its type wrapper.
fn bare(debug: &str) -> &str {
    debug
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(debug)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::Literal;

    #[test]
    fn partitions_render_as_name_value() {
        let p = Struct::from_iter([Some(Literal::int(3)), None, Some(Literal::string("a"))]);
        let names = ["p".to_owned(), "q".to_owned(), "r".to_owned()];
        assert_eq!(render(&names, &p), "p=3/q=null/r=\"a\"");
        assert_eq!(render(&[], &Struct::empty()), "");
    }
}
