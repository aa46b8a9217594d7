//! The heat ledger: bytes read per (table, partition, column), decaying with a half-life, so
//! heat outlives the files it was measured on (a compaction replaces files, not partitions or
//! columns). Persisted as JSON (write to a temp file, then rename) and reloaded on start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::mapper::FileInfo;
use floe_core::worker::now_secs;

/// (table, partition, column).
pub type HeatKey = (String, String, String);

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Cell {
    /// Heat as of `at`.
    value: f64,
    /// Unix seconds.
    at: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct Persisted {
    half_life_secs: u64,
    cells: Vec<(HeatKey, f64, u64)>,
}

/// The ledger.
pub struct Ledger {
    path: PathBuf,
    half_life: f64,
    cells: Mutex<HashMap<HeatKey, Cell>>,
    /// Accesses that matched no mapped file.
    unmapped: AtomicU64,
}

/// Cells decaying below this are forgotten on save.
const FORGET_BELOW: f64 = 1.0;

impl Ledger {
    /// Opens the ledger at `path` (empty when the file is missing or unreadable, with a warning).
    pub fn open(path: &Path, half_life_secs: u64) -> Self {
        let cells = match std::fs::read(path) {
            Ok(b) => match serde_json::from_slice::<Persisted>(&b) {
                Ok(p) => p
                    .cells
                    .into_iter()
                    .map(|(k, value, at)| (k, Cell { value, at }))
                    .collect(),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "heat ledger unreadable; starting empty");
                    HashMap::new()
                }
            },
            Err(_) => HashMap::new(),
        };
        Self {
            path: path.to_owned(),
            half_life: half_life_secs.max(1) as f64,
            cells: Mutex::new(cells),
            unmapped: AtomicU64::new(0),
        }
    }

    fn decayed(&self, c: Cell, now: u64) -> f64 {
        c.value * 0.5f64.powf(now.saturating_sub(c.at) as f64 / self.half_life)
    }

    /// Adds `bytes` of heat to a cell.
    pub fn add(&self, key: HeatKey, bytes: f64, now: u64) {
        if let Ok(mut cells) = self.cells.lock() {
            let cell = cells.entry(key).or_insert(Cell {
                value: 0.0,
                at: now,
            });
            let v = self.decayed(*cell, now);
            *cell = Cell {
                value: v + bytes,
                at: now,
            };
        }
    }

    /// Records one access against the file it hit (`None`: not a mapped file).
    pub fn record(&self, file: Option<&Arc<FileInfo>>, offset: u64, len: u64, now: u64) {
        let Some(f) = file else {
            self.unmapped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        for (column, bytes) in f.columns_in(offset, len) {
            let key = (
                f.table.to_string(),
                f.partition.to_string(),
                column.to_string(),
            );
            self.add(key, bytes as f64, now);
        }
    }

    /// Accesses that matched no mapped file so far.
    pub fn unmapped(&self) -> u64 {
        self.unmapped.load(Ordering::Relaxed)
    }

    /// The `n` hottest cells, optionally of one table, hottest first.
    pub fn top(&self, table: Option<&str>, n: usize) -> Vec<(HeatKey, f64)> {
        self.top_at(table, n, now_secs())
    }

    /// [`Ledger::top`] as of `now` (unix seconds).
    pub fn top_at(&self, table: Option<&str>, n: usize, now: u64) -> Vec<(HeatKey, f64)> {
        let Ok(cells) = self.cells.lock() else {
            return Vec::new();
        };
        let mut v: Vec<(HeatKey, f64)> = cells
            .iter()
            .filter(|(k, _)| table.is_none_or(|t| k.0 == t))
            .map(|(k, c)| (k.clone(), self.decayed(*c, now)))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v.truncate(n);
        v
    }

    /// Writes the ledger (temp file + rename, so a crash leaves the old or the new file).
    pub fn save(&self) -> std::io::Result<()> {
        let now = now_secs();
        let p = {
            let Ok(cells) = self.cells.lock() else {
                return Ok(());
            };
            Persisted {
                half_life_secs: self.half_life as u64,
                cells: cells
                    .iter()
                    .map(|(k, c)| (k.clone(), self.decayed(*c, now), now))
                    .filter(|(_, v, _)| *v >= FORGET_BELOW)
                    .collect(),
            }
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let body = serde_json::to_vec(&p).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, body)?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapper::Chunk;

    fn key(c: &str) -> HeatKey {
        ("db.t".into(), "p=1".into(), c.into())
    }

    #[test]
    fn heat_decays_by_half_life_and_ranks() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(&dir.path().join("h.json"), 10);
        l.add(key("a"), 100.0, 1000);
        l.add(key("a"), 100.0, 1010); // 100 decayed to 50, plus 100
        l.add(key("b"), 10.0, 1010);
        let cells = l.cells.lock().unwrap();
        assert!((cells[&key("a")].value - 150.0).abs() < 1e-9);
        drop(cells);
        let top = l.top_at(Some("db.t"), 1, 1010);
        assert_eq!(top[0].0, key("a"));
    }

    #[test]
    fn accesses_map_to_columns_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/h.json");
        let l = Ledger::open(&path, 3600);
        let f = Arc::new(FileInfo {
            table: Arc::from("db.t"),
            partition: Arc::from("p=1"),
            size: 100,
            chunks: vec![Chunk {
                column: Arc::from("v"),
                start: 4,
                len: 50,
            }],
        });
        l.record(Some(&f), 0, 30, now_secs());
        l.record(None, 0, 30, now_secs());
        assert_eq!(l.unmapped(), 1);
        l.save().unwrap();
        let again = Ledger::open(&path, 3600);
        let top = again.top(None, 5);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0, key("v"));
        assert!((top[0].1 - 26.0).abs() < 0.1, "{}", top[0].1);
    }

    #[test]
    fn a_corrupt_file_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.json");
        std::fs::write(&path, b"{not json").unwrap();
        assert!(Ledger::open(&path, 60).top(None, 1).is_empty());
    }
}
