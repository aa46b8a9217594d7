//! The file map: data file -> (table, partition, column chunk byte ranges), built by the warmer
//! from manifests and footers and published by one atomic swap. Readers (the heat ledger, the
//! prefetcher) never wait on a writer and never see a half-built map.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

/// One column chunk of one row group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Column path (dotted).
    pub column: Arc<str>,
    /// First byte in the file.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What the catalog and the footer say about one data file.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// `namespace.table`.
    pub table: Arc<str>,
    /// The partition tuple, rendered (`p=3`; empty when unpartitioned).
    pub partition: Arc<str>,
    /// File size.
    pub size: u64,
    /// Column chunks, sorted by start.
    pub chunks: Vec<Chunk>,
}

impl FileInfo {
    /// The columns whose chunks overlap bytes `offset..offset+len`, with the overlap in bytes.
    pub fn columns_in(&self, offset: u64, len: u64) -> impl Iterator<Item = (&Arc<str>, u64)> {
        let end = offset.saturating_add(len);
        self.chunks.iter().filter_map(move |c| {
            let lo = c.start.max(offset);
            let hi = (c.start + c.len).min(end);
            (hi > lo).then(|| (&c.column, hi - lo))
        })
    }
}

/// Key of the map: (bucket, key).
pub type FileKey = (String, String);

/// The published file map.
#[derive(Default)]
pub struct FileMap {
    current: ArcSwap<HashMap<FileKey, Arc<FileInfo>>>,
}

impl FileMap {
    /// The current map (a cheap snapshot).
    pub fn load(&self) -> Arc<HashMap<FileKey, Arc<FileInfo>>> {
        self.current.load_full()
    }

    /// Replaces `table`'s entries with `files` in one swap.
    pub fn publish_table(&self, table: &str, files: Vec<(FileKey, FileInfo)>) {
        self.current.rcu(|old| {
            let mut next: HashMap<FileKey, Arc<FileInfo>> = old
                .iter()
                .filter(|(_, f)| &*f.table != table)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, f) in &files {
                next.insert(k.clone(), Arc::new(f.clone()));
            }
            next
        });
    }

    /// Number of files mapped.
    pub fn len(&self) -> usize {
        self.current.load().len()
    }

    /// True when nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A file of `table` with two column chunks: 4+40 and 44+40 of 100 bytes.
    pub(crate) fn info(table: &str) -> FileInfo {
        FileInfo {
            table: Arc::from(table),
            partition: Arc::from("p=1"),
            size: 100,
            chunks: vec![
                Chunk {
                    column: Arc::from("a"),
                    start: 4,
                    len: 40,
                },
                Chunk {
                    column: Arc::from("b"),
                    start: 44,
                    len: 40,
                },
            ],
        }
    }

    #[test]
    fn overlap_is_counted_per_column() {
        let f = info("t");
        let got: Vec<(String, u64)> = f
            .columns_in(30, 20)
            .map(|(c, n)| (c.to_string(), n))
            .collect();
        assert_eq!(got, vec![("a".into(), 14), ("b".into(), 6)]);
        assert_eq!(f.columns_in(90, 10).count(), 0);
    }

    #[test]
    fn publish_replaces_only_that_table() {
        let m = FileMap::default();
        let k = |s: &str| ("b".to_owned(), s.to_owned());
        m.publish_table("t", vec![(k("1"), info("t")), (k("2"), info("t"))]);
        m.publish_table("u", vec![(k("3"), info("u"))]);
        let before = m.load();
        m.publish_table("t", vec![(k("4"), info("t"))]);
        assert_eq!(
            before.len(),
            3,
            "a snapshot taken before the swap is unchanged"
        );
        let now = m.load();
        assert!(now.contains_key(&k("4")) && now.contains_key(&k("3")));
        assert!(!now.contains_key(&k("1")));
    }
}
