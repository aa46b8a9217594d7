//! The conformance check's report and its verdicts: a run that failed, a table that ended
//! unlike the clean run's, a schema that drifted between runs.

use serde::Serialize;

use super::ident_part;
use super::state::{self, TableState};
use floe_sched::config::Deployment;
use floe_sched::queue::Outcome;

/// One check's verdict.
#[derive(Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// Why not (or what was seen).
    pub detail: String,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The deployment checked.
    pub deployment: String,
    /// The event replayed.
    pub event_id: String,
    /// The checks, in order.
    pub checks: Vec<Check>,
    /// Scratch tables kept for inspection (a check failed).
    pub kept: Vec<String>,
}

impl Report {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The report as text lines.
    pub fn render(&self) -> String {
        let mut out = format!("conform {} (event {})\n", self.deployment, self.event_id);
        for c in &self.checks {
            let mark = if c.ok { "ok  " } else { "FAIL" };
            out += &format!("{mark} {}", c.name);
            if !c.detail.is_empty() {
                out += &format!(": {}", c.detail);
            }
            out += "\n";
        }
        if !self.kept.is_empty() {
            out += &format!("scratch tables kept: {}\n", self.kept.join(", "));
        }
        out += if self.passed() { "PASS\n" } else { "FAIL\n" };
        out
    }
}

/// One commit a run's SDK reported.
#[derive(Debug)]
pub(super) struct Reported {
    /// The output table (named as configured, not as the phase's scratch copy).
    pub(super) table: String,
    /// The commit's sequence within the run.
    pub(super) sequence: i64,
    /// The Arrow schema of the rows passed.
    pub(super) schema: String,
}

/// The commits a run's SDK reported on its last stdout line.
pub(super) fn reported(o: &Outcome, d: &Deployment) -> Vec<Reported> {
    let Some(stdout) = o.log.split("--- stdout\n").nth(1) else {
        return Vec::new();
    };
    let stdout = stdout.split("--- stderr\n").next().unwrap_or_default();
    let Some(doc) = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    else {
        return Vec::new();
    };
    let commits = doc["commits"].as_array().cloned().unwrap_or_default();
    commits
        .iter()
        .map(|c| {
            let table = c["table"].as_str().unwrap_or_default();
            // Name the output table, not the phase's scratch copy.
            let named = d
                .output_tables
                .iter()
                .find(|t| table.ends_with(&format!("__{}", ident_part(t))))
                .map_or(table, String::as_str)
                .to_owned();
            Reported {
                table: named,
                sequence: c["sequence"].as_i64().unwrap_or(0),
                schema: c["schema"].as_str().unwrap_or_default().to_owned(),
            }
        })
        .collect()
}

pub(super) fn ran(name: &str, o: &Outcome) -> Check {
    let ok = o.result == "ok";
    let detail = if ok {
        String::new()
    } else {
        let tail: String = o
            .log
            .chars()
            .rev()
            .take(600)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("{} (exit {:?}): {}", o.result, o.exit_code, tail.trim())
    };
    Check {
        name: name.into(),
        ok,
        detail,
    }
}

pub(super) fn same(name: &str, d: &Deployment, want: &[TableState], got: &[TableState]) -> Check {
    let diffs: Vec<String> = d
        .output_tables
        .iter()
        .zip(want.iter().zip(got))
        .filter_map(|(t, (w, g))| state::diff(w, g).map(|x| format!("{t}: {x}")))
        .collect();
    Check {
        name: name.into(),
        ok: diffs.is_empty(),
        detail: diffs.join("; "),
    }
}

/// Every run passed rows of one schema to each (table, commit).
pub(super) fn stable(runs: &[(String, Vec<Reported>)]) -> Check {
    let mut first: std::collections::BTreeMap<(String, i64), (String, String)> = Default::default();
    let mut drift = Vec::new();
    for (run, commits) in runs {
        for c in commits {
            let (table, seq, schema) = (&c.table, c.sequence, &c.schema);
            match first.get(&(table.clone(), seq)) {
                None => {
                    first.insert((table.clone(), seq), (run.clone(), schema.clone()));
                }
                Some((r0, s0)) if s0 != schema => drift.push(format!(
                    "{table} commit {seq}: the {run} wrote [{}] where the {r0} wrote [{}]",
                    schema.replace('\n', ", "),
                    s0.replace('\n', ", ")
                )),
                Some(_) => {}
            }
        }
    }
    Check {
        name: "the schema is the same in every run".into(),
        ok: drift.is_empty(),
        detail: drift.join("; "),
    }
}
