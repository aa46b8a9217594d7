//! What the pins keep, file by file: each pinned table's live files (those of its
//! partitions), whole or the chosen columns' chunks, by bucket, as the nodes' `PUT /kept`
//! bodies carry them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::mapper::{FileInfo, FileKey};
use crate::pins::Pin;
use crate::warmer::LiveFile;

/// What a node keeps of one pinned file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptFile {
    /// Its size.
    pub size: u64,
    /// Pinned in part: flat `[start, len, ...]` byte ranges (the chosen columns' chunks).
    /// `None`: whole.
    pub ranges: Option<Vec<u64>>,
}

impl KeptFile {
    /// Adds what another pin keeps of the same file: whole wins, ranges add up.
    fn merge(&mut self, other: KeptFile) {
        match (&mut self.ranges, other.ranges) {
            (Some(mine), Some(theirs)) => mine.extend(theirs),
            (mine, _) => *mine = None,
        }
    }

    /// Bytes it pins.
    pub fn bytes(&self) -> u64 {
        match &self.ranges {
            None => self.size,
            Some(r) => r.chunks_exact(2).map(|c| c[1]).sum(),
        }
    }
}

/// The pinned files of every pin, by bucket (each file once), from each table's live files
/// (and, for pins of some columns, the file map's column chunks); beside it each pin's files
/// and bytes. A pin whose table has no warmed commit yet has none. A file whose chunks are not
/// mapped (over the warm budget) is pinned whole.
pub fn files_of(
    pins: &[Pin],
    live: &BTreeMap<String, std::sync::Arc<Vec<LiveFile>>>,
    chunks: &HashMap<FileKey, Arc<FileInfo>>,
) -> (Sets, Vec<(u64, u64)>) {
    let mut sets: Sets = BTreeMap::new();
    let mut counts = Vec::new();
    for pin in pins {
        let (mut files, mut bytes) = (0, 0);
        for f in live.get(&pin.table).iter().flat_map(|l| l.iter()) {
            if !pin.matches(&f.partition) {
                continue;
            }
            let ranges = match (&pin.columns, chunks.get(&f.loc)) {
                (Some(_), Some(info)) => Some(
                    info.chunks
                        .iter()
                        .filter(|c| pin.keeps_column(&c.column))
                        .flat_map(|c| [c.start, c.len])
                        .collect(),
                ),
                _ => None,
            };
            let kept = KeptFile {
                size: f.size,
                ranges,
            };
            files += 1;
            bytes += kept.bytes();
            let (bucket, key) = &f.loc;
            match sets.entry(bucket.clone()).or_default().entry(key.clone()) {
                std::collections::btree_map::Entry::Vacant(v) => drop(v.insert(kept)),
                std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().merge(kept),
            }
        }
        counts.push((files, bytes));
    }
    (sets, counts)
}

/// [`files_of`] over the control plane's current state.
pub fn current(ctl: &crate::state::Control, pins: &[Pin]) -> (Sets, Vec<(u64, u64)>) {
    files_of(pins, &ctl.live_files(), &ctl.files.load())
}

/// Pinned files by bucket: key -> what is kept of it.
pub type Sets = BTreeMap<String, BTreeMap<String, KeptFile>>;

/// The body of one bucket's `PUT /kept`.
pub fn body(set: Option<&BTreeMap<String, KeptFile>>) -> floe_core::wire::KeptBody {
    let mut out = floe_core::wire::KeptBody::default();
    for (key, kept) in set.into_iter().flatten() {
        out.keys.push((key.clone(), kept.size));
        if let Some(r) = &kept.ranges {
            out.parts.insert(key.clone(), r.clone());
        }
    }
    out
}

/// The files of `sets` (bucket, key, what is kept) not kept the same way in `before`.
pub fn added(sets: &Sets, before: &Sets) -> Vec<(FileKey, KeptFile)> {
    sets.iter()
        .flat_map(|(b, keys)| {
            keys.iter()
                .filter(move |(k, kept)| before.get(b).and_then(|old| old.get(*k)) != Some(*kept))
                .map(move |(k, kept)| ((b.clone(), k.clone()), kept.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::Pin;

    fn chunks() -> HashMap<FileKey, Arc<FileInfo>> {
        let info = crate::mapper::tests::info("db.t");
        [(("b".to_owned(), "a".to_owned()), Arc::new(info))].into()
    }

    fn file(key: &str, partition: &str, size: u64) -> LiveFile {
        LiveFile {
            loc: ("b".to_owned(), key.to_owned()),
            partition: partition.to_owned(),
            size,
            new: false,
        }
    }

    #[test]
    fn sets_hold_each_file_once_and_count_per_pin() {
        let mut live = BTreeMap::new();
        live.insert(
            "db.t".to_owned(),
            Arc::new(vec![file("a", "d=1", 10), file("b", "d=2", 20)]),
        );
        let pin = |table: &str, partition: Option<&str>, columns: Option<&[&str]>| Pin {
            table: table.into(),
            partition: partition.map(str::to_owned),
            columns: columns.map(|c| c.iter().map(|s| s.to_string()).collect()),
        };
        let pins = [
            pin("db.t", None, None),
            pin("db.t", Some("d=2"), None),
            pin("db.other", None, None),
            pin("db.t", None, Some(&["b"])),
        ];
        let (sets, counts) = files_of(&pins, &live, &chunks());
        // File a's chunks are mapped (b: 44+40); file b's are not, so it is pinned whole.
        assert_eq!(counts, [(2, 30), (1, 20), (0, 0), (2, 40 + 20)]);
        assert_eq!(sets["b"].len(), 2);
        assert_eq!(
            sets["b"]["a"].ranges, None,
            "a whole pin wins over a pin of columns"
        );
        let (columns_only, _) = files_of(&pins[3..], &live, &chunks());
        assert_eq!(columns_only["b"]["a"].ranges, Some(vec![44, 40]));
        let whole = |size| KeptFile { size, ranges: None };
        let before: Sets = [("b".to_owned(), [("a".to_owned(), whole(10))].into())].into();
        assert_eq!(
            added(&sets, &before),
            [(("b".to_owned(), "b".to_owned()), whole(20))]
        );
        let body = body(columns_only.get("b"));
        assert_eq!(body.keys, [("a".to_owned(), 10), ("b".to_owned(), 20)]);
        assert_eq!(body.parts["a"], [44, 40]);
        assert!(pin("t", None, Some(&["a"])).keeps_column("a.x"));
        assert!(!pin("t", None, Some(&["a"])).keeps_column("ab"));
    }
}
