//! Pins: tables (or some of their partitions) an operator keeps in the fleet's cache. A pin
//! names a followed table and, optionally, partitions (`--partition day=3`); its files are the
//! table's live data files at its current commit, so a compaction moves the pin to the new
//! files. The [`keeper`] worker sends each bucket's pinned files to every node (`PUT /kept`):
//! there they go to the kept store, DRAM other reads cannot evict, each node holding the blocks
//! it owns. A node bounds what it keeps (`cache.pinned_bytes`); a pin past the bound is
//! refused whole, with the node's reason, and never kept in part. Pins persist in
//! `pins.path` (JSON), so they outlive a restart of floe-control; a restarted proxy gets them
//! back at the keeper's next poll.

pub mod api;
pub mod keeper;
pub mod sets;

pub use sets::{added, body, current, files_of, KeptFile, Sets};

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What an operator pinned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// `namespace.table`.
    pub table: String,
    /// Partitions as `name=value` terms joined by `/` or `,`: a file is pinned when its
    /// partition has every term (quotes around values are ignored). `None`: every file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Columns (dotted paths; a name also takes its nested fields): only their column chunks
    /// are kept (footers stay in the metadata store as always). `None`: every column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
}

impl Pin {
    /// Whether the pin keeps `column`'s chunks.
    pub fn keeps_column(&self, column: &str) -> bool {
        self.columns.as_ref().is_none_or(|cols| {
            cols.iter().any(|c| {
                column == c
                    || column
                        .strip_prefix(c.as_str())
                        .is_some_and(|rest| rest.starts_with('.'))
            })
        })
    }

    /// Whether a file of partition `rendered` (the warmer's `name=value/...`) is pinned.
    pub fn matches(&self, rendered: &str) -> bool {
        let Some(spec) = &self.partition else {
            return true;
        };
        let have: Vec<(String, String)> = terms(rendered).collect();
        terms(spec).all(|t| have.contains(&t))
    }
}

/// `a=1/b="x"` -> (`a`, `1`), (`b`, `x`).
fn terms(spec: &str) -> impl Iterator<Item = (String, String)> + '_ {
    spec.split(['/', ','])
        .filter(|t| !t.trim().is_empty())
        .map(|t| match t.split_once('=') {
            Some((n, v)) => (n.trim().to_owned(), v.trim().trim_matches('"').to_owned()),
            None => (t.trim().to_owned(), String::new()),
        })
}

/// Where a pin stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinPhase {
    /// Not yet sent to the nodes (its table's first commit not warmed yet).
    #[default]
    Pending,
    /// Sent; its files are being warmed into the owners' kept stores.
    Warming,
    /// Every node holds what it owns of it.
    Kept,
    /// A node refused the set (over its bound); the note names the node and the bound.
    Refused,
}

/// A pin and what it holds now.
#[derive(Debug, Clone, Serialize)]
pub struct PinView {
    /// The pin.
    #[serde(flatten)]
    pub pin: Pin,
    /// Its phase.
    pub phase: PinPhase,
    /// Files pinned (the table's current ones that match).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Why it was refused, when it was.
    pub note: String,
}

/// The pins, persisted, with what each holds.
pub struct PinBook {
    path: PathBuf,
    pins: Mutex<Vec<PinView>>,
}

impl PinBook {
    /// Loads the pins persisted at `path` (none when the file is absent or unreadable, which
    /// is logged).
    pub fn open(path: &Path) -> Self {
        let pins: Vec<Pin> = match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "pins unreadable; none kept");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        let views = pins
            .into_iter()
            .map(|pin| PinView {
                pin,
                phase: PinPhase::Pending,
                files: 0,
                bytes: 0,
                note: String::new(),
            })
            .collect();
        Self {
            path: path.to_owned(),
            pins: Mutex::new(views),
        }
    }

    /// Every pin and its state.
    pub fn views(&self) -> Vec<PinView> {
        self.pins.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// The pins.
    pub fn pins(&self) -> Vec<Pin> {
        self.views().into_iter().map(|v| v.pin).collect()
    }

    /// Whether `pin` is held.
    pub fn contains(&self, pin: &Pin) -> bool {
        self.pins
            .lock()
            .is_ok_and(|p| p.iter().any(|v| v.pin == *pin))
    }

    /// Adds `pin` and persists the book.
    pub fn add(&self, pin: Pin) -> std::io::Result<()> {
        if let Ok(mut p) = self.pins.lock() {
            if !p.iter().any(|v| v.pin == pin) {
                p.push(PinView {
                    pin,
                    phase: PinPhase::Pending,
                    files: 0,
                    bytes: 0,
                    note: String::new(),
                });
            }
        }
        self.save()
    }

    /// Removes `pin` and persists the book; false when it was not there.
    pub fn remove(&self, pin: &Pin) -> std::io::Result<bool> {
        let removed = match self.pins.lock() {
            Ok(mut p) => {
                let before = p.len();
                p.retain(|v| v.pin != *pin);
                p.len() != before
            }
            Err(_) => false,
        };
        self.save()?;
        Ok(removed)
    }

    /// Updates the state of `pin`.
    pub fn update(&self, pin: &Pin, f: impl FnOnce(&mut PinView)) {
        if let Ok(mut p) = self.pins.lock() {
            if let Some(v) = p.iter_mut().find(|v| v.pin == *pin) {
                f(v);
            }
        }
    }

    fn save(&self) -> std::io::Result<()> {
        let body = serde_json::to_vec_pretty(&self.pins()).map_err(std::io::Error::other)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, body)?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_match_by_terms_and_quotes_do_not_matter() {
        let pin = |p: Option<&str>| Pin {
            table: "db.t".into(),
            partition: p.map(str::to_owned),
            columns: None,
        };
        assert!(pin(None).matches("day=3/region=\"eu\""));
        assert!(pin(Some("region=eu")).matches("day=3/region=\"eu\""));
        assert!(pin(Some("day=3,region=eu")).matches("day=3/region=\"eu\""));
        assert!(!pin(Some("day=4")).matches("day=3/region=\"eu\""));
        assert!(!pin(Some("day=3")).matches(""));
    }

    #[test]
    fn the_book_persists_and_survives_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        let book = PinBook::open(&path);
        let pin = Pin {
            table: "db.t".into(),
            partition: Some("d=1".into()),
            columns: Some(vec!["a".into()]),
        };
        book.add(pin.clone()).unwrap();
        book.add(pin.clone()).unwrap();
        assert_eq!(PinBook::open(&path).pins(), std::slice::from_ref(&pin));
        assert!(book.remove(&pin).unwrap());
        assert!(!book.remove(&pin).unwrap());
        assert!(PinBook::open(&path).pins().is_empty());
        std::fs::write(&path, b"{not json").unwrap();
        assert!(PinBook::open(&path).pins().is_empty());
    }
}
