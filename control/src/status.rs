//! The status endpoint (`GET /status`, JSON) and the `floe-control status` printer.

use serde_json::{json, Value};

use crate::state::Control;

/// The status document.
pub fn document(ctl: &Control) -> Value {
    let heat: Vec<Value> = ctl
        .heat
        .top(None, 20)
        .into_iter()
        .map(|((t, p, c), v)| json!({"table": t, "partition": p, "column": c, "bytes": v.round()}))
        .collect();
    json!({
        "workers": ctl.board.snapshot(),
        "tables": ctl.tables(),
        "mapped_files": ctl.files.len(),
        "heat": heat,
        "unmapped_accesses": ctl.heat.unmapped(),
        "pins": ctl.pins.views(),
    })
}

/// The control plane's progress as metric families (`GET /metrics`, OTLP): per followed
/// table, the objects to warm and warmed on its last commit, the bytes warmed and prefetched,
/// the commits seen; and the file map's size. Built from the state at each scrape, in a
/// registry of its own (label values escaped by the prometheus crate's encoder).
pub fn metric_families(ctl: &Control) -> Vec<prometheus::proto::MetricFamily> {
    use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
    let reg = Registry::new();
    let vec = |name: &str, help: &str, labels: &[&str]| {
        let g = IntGaugeVec::new(Opts::new(name, help), labels).ok()?;
        reg.register(Box::new(g.clone())).ok()?;
        Some(g)
    };
    let objects = vec(
        "floe_control_warm_objects",
        "Objects to warm (total) and warmed (done) for the table's last commit",
        &["table", "state"],
    );
    let bytes = vec(
        "floe_control_warm_bytes",
        "Bytes warmed for the table's last commit",
        &["table"],
    );
    let prefetched = vec(
        "floe_control_prefetched_bytes",
        "Bytes prefetched after the table's last compaction",
        &["table"],
    );
    let commits = vec(
        "floe_control_commits",
        "Commits of the table seen since start",
        &["table"],
    );
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (t, st) in ctl.tables() {
        let w = &st.warm;
        if let Some(g) = &objects {
            g.with_label_values(&[t.as_str(), "total"]).set(n(w.total));
            g.with_label_values(&[t.as_str(), "done"]).set(n(w.done));
        }
        for (g, v) in [
            (&bytes, w.bytes),
            (&prefetched, w.prefetched_bytes),
            (&commits, st.commits),
        ] {
            if let Some(g) = g {
                g.with_label_values(&[t.as_str()]).set(n(v));
            }
        }
    }
    if let Ok(g) = IntGauge::new(
        "floe_control_mapped_files",
        "Live data files in the file map",
    ) {
        g.set(n(ctl.files.len() as u64));
        let _ = reg.register(Box::new(g));
    }
    reg.gather()
}

/// Renders the status document for a terminal.
pub fn render(doc: &Value) -> String {
    let mut out = String::from("TABLES\n");
    if let Some(tables) = doc["tables"].as_object() {
        for (name, t) in tables {
            let w = &t["warm"];
            let (done, total) = (
                w["done"].as_u64().unwrap_or(0),
                w["total"].as_u64().unwrap_or(0),
            );
            out += &format!(
                "  {name}  snapshot {}  {}  files {}  {} {} {done}/{total}  {} B warmed, {} B prefetched {}\n",
                t["snapshot_id"],
                t["operation"].as_str().unwrap_or(""),
                t["data_files"],
                w["phase"].as_str().unwrap_or(""),
                bar(done, total),
                w["bytes"],
                w["prefetched_bytes"],
                w["note"].as_str().unwrap_or(""),
            );
        }
    }
    out += "WORKERS\n";
    if let Some(ws) = doc["workers"].as_object() {
        for (name, w) in ws {
            out += &format!(
                "  {name:<10} {:<9} runs {:<6} {} {}\n",
                w["state"].as_str().unwrap_or(""),
                w["runs"],
                w["detail"].as_str().unwrap_or(""),
                w["last_error"][1]
                    .as_str()
                    .map(|e| format!("(last error: {e})"))
                    .unwrap_or_default(),
            );
        }
    }
    out += "HEAT (bytes read, decayed)\n";
    if let Some(rows) = doc["heat"].as_array() {
        for r in rows {
            out += &format!(
                "  {:>12}  {}  {}  {}\n",
                r["bytes"],
                r["table"].as_str().unwrap_or(""),
                r["partition"].as_str().unwrap_or(""),
                r["column"].as_str().unwrap_or("")
            );
        }
    }
    if let Some(s) = doc.get("scheduler") {
        out += &render_scheduler(s);
    }
    out
}

/// The scheduler's part of `status`: deployments and next fires, queue depth, runs under way.
fn render_scheduler(s: &Value) -> String {
    let q = &s["queue"];
    let mut out = format!(
        "SCHEDULER ({})  queue: {} ready, {} running, {} done, {} failed\n",
        s["store"].as_str().unwrap_or(""),
        q["ready"],
        q["running"],
        q["done"],
        q["failed"]
    );
    for d in s["deployments"].as_array().into_iter().flatten() {
        let next: Vec<&str> = d["next_fires"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out += &format!(
            "  {:<20} triggers {}  next {}\n",
            d["name"].as_str().unwrap_or(""),
            d["triggers"],
            if next.is_empty() {
                "-".to_owned()
            } else {
                next.join(", ")
            }
        );
    }
    for r in s["running"].as_array().into_iter().flatten() {
        out += &format!(
            "  running {}  attempt {}  generation {}\n",
            r["job"].as_str().unwrap_or(""),
            r["attempt"],
            r["generation"]
        );
    }
    out
}

/// Renders `GET /runs` for a terminal: one line per run.
pub fn render_runs(doc: &Value) -> String {
    let mut out =
        String::from("DEPLOYMENT           TRIGGER  ATTEMPT GEN  RESULT   EXIT  MS      JOB\n");
    for r in doc.as_array().into_iter().flatten() {
        let ms = match (r["ended_ms"].as_i64(), r["started_ms"].as_i64()) {
            (Some(e), Some(s)) => (e - s).to_string(),
            _ => "-".into(),
        };
        out += &format!(
            "{:<20} {:<8} {:<7} {:<4} {:<8} {:<5} {:<7} {}\n",
            r["deployment"].as_str().unwrap_or(""),
            r["trigger"].as_str().unwrap_or(""),
            r["attempt"],
            r["generation"],
            r["result"].as_str().unwrap_or("running"),
            r["exit_code"]
                .as_i64()
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            ms,
            r["job_id"].as_str().unwrap_or(""),
        );
    }
    out
}

/// A 20-cell progress bar.
fn bar(done: u64, total: u64) -> String {
    let filled = (done.min(total) * 20).checked_div(total).unwrap_or(20) as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(20 - filled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_fills_in_proportion() {
        assert_eq!(
            bar(5, 10),
            format!("[{}{}]", "#".repeat(10), ".".repeat(10))
        );
        assert_eq!(bar(0, 0), format!("[{}]", "#".repeat(20)));
    }

    #[test]
    fn render_shows_tables_workers_heat() {
        let doc = json!({
            "tables": {"db.t": {"snapshot_id": 7, "operation": "append", "data_files": 2,
                "warm": {"phase": "warming", "done": 1, "total": 4, "bytes": 10, "prefetched_bytes": 0, "note": ""}}},
            "workers": {"watcher": {"state": "idle", "runs": 3, "detail": "", "last_error": null}},
            "heat": [{"table": "db.t", "partition": "p=1", "column": "v", "bytes": 42.0}],
        });
        let s = render(&doc);
        assert!(
            s.contains("db.t  snapshot 7  append  files 2  warming [#####...............] 1/4"),
            "{s}"
        );
        assert!(s.contains("watcher") && s.contains("p=1  v"), "{s}");
    }
}
