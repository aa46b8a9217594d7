//! What the fill policy knows about a file before it reads it: the column-chunk byte ranges of
//! live Iceberg data files, published by the control plane (`POST /chunks`) from the Parquet
//! footers it decoded. A miss that starts at a known chunk's first byte fetches on to the
//! chunk's end (capped), since an engine that reads a chunk's start reads the rest of it.
//!
//! Looked up on the miss path only (a read lock and two string hashes); replaced per table
//! when a commit changes the table's live files; bounded in chunks held.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Most chunk ranges held per node (16 bytes each: 16 MiB). A table set beyond it is refused
/// (counted in the answer) rather than evict other tables' hints: misses then fall back to
/// plain range fills, which is correct, just slower.
pub const MAX_HINT_CHUNKS: usize = 1 << 20;

/// Most bytes a column-chunk fill fetches past the read that started it: 8 MiB covers the
/// chunks of typical row groups (128 MiB files, tens of columns) whole; a longer chunk's rest
/// comes by sequential read-ahead as the engine reads on.
pub const MAX_CHUNK_FILL: u64 = 8 << 20;

/// The column chunks of one file version: `(start, end)` byte ranges sorted by start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChunks {
    /// The file's size (a hint is used only for a version of this size).
    pub size: u64,
    /// `(first byte, end)` of each chunk, end exclusive, sorted by first byte.
    pub chunks: Box<[(u64, u64)]>,
}

impl FileChunks {
    /// Chunks from `(start, len)` pairs; drops empty and out-of-file ones and sorts the rest.
    pub fn new(size: u64, pairs: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut chunks: Vec<(u64, u64)> = pairs
            .into_iter()
            .filter_map(|(s, l)| Some((s, s.checked_add(l)?)))
            .filter(|(s, e)| e > s && *e <= size)
            .collect();
        chunks.sort_unstable();
        Self {
            size,
            chunks: chunks.into(),
        }
    }

    /// Where a fill for a read of bytes `first..=last` should end (exclusive): the end of the
    /// chunk that starts at `first`, at most [`MAX_CHUNK_FILL`] past `first`; `None` when no
    /// chunk starts there or the read covers it already.
    pub fn fill_end(&self, first: u64, last: u64) -> Option<u64> {
        let i = self.chunks.partition_point(|(s, _)| *s < first);
        let &(start, end) = self.chunks.get(i)?;
        let end = end.min(first.saturating_add(MAX_CHUNK_FILL));
        (start == first && end > last.saturating_add(1)).then_some(end)
    }
}

/// (bucket, table).
type TableKey = (Box<str>, Box<str>);

#[derive(Default)]
struct Inner {
    /// bucket -> key -> chunks.
    files: HashMap<Box<str>, HashMap<Box<str>, Arc<FileChunks>>>,
    /// (bucket, table) -> the keys it published.
    tables: HashMap<TableKey, Vec<Box<str>>>,
    /// Chunk ranges held.
    chunks: usize,
}

/// The column-chunk hints of every route on this node.
#[derive(Default)]
pub struct ChunkHints {
    inner: RwLock<Inner>,
}

/// What a publication kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Files whose hints are held now.
    pub files: u64,
    /// Files refused (over [`MAX_HINT_CHUNKS`]).
    pub refused: u64,
}

impl ChunkHints {
    /// Sets `table`'s hints in `bucket` to `files`: with `replace`, the table's earlier files
    /// are dropped first (a commit's whole live set); without, `files` are added (a later
    /// batch of the same set).
    pub fn publish(
        &self,
        bucket: &str,
        table: &str,
        replace: bool,
        files: Vec<(String, FileChunks)>,
    ) -> Published {
        let Ok(mut g) = self.inner.write() else {
            return Published {
                files: 0,
                refused: files.len() as u64,
            };
        };
        let inner = &mut *g;
        let tkey: TableKey = (bucket.into(), table.into());
        let by_key = inner.files.entry(bucket.into()).or_default();
        let listed = inner.tables.entry(tkey).or_default();
        if replace {
            for k in listed.drain(..) {
                if let Some(old) = by_key.remove(&k) {
                    inner.chunks -= old.chunks.len();
                }
            }
        }
        let mut out = Published {
            files: 0,
            refused: 0,
        };
        for (key, fc) in files {
            let n = fc.chunks.len();
            let old = by_key.get(key.as_str()).map_or(0, |o| o.chunks.len());
            if inner.chunks - old + n > MAX_HINT_CHUNKS {
                out.refused += 1;
                continue;
            }
            let key: Box<str> = key.into();
            if by_key.insert(key.clone(), Arc::new(fc)).is_none() {
                listed.push(key);
            }
            inner.chunks = inner.chunks - old + n;
            out.files += 1;
        }
        out
    }

    /// The hints of `bucket`/`key` for a version of `size` bytes (`None`: any size, for a
    /// read that does not know the version yet).
    pub fn get(&self, bucket: &str, key: &str, size: Option<u64>) -> Option<Arc<FileChunks>> {
        let g = self.inner.read().ok()?;
        let f = g.files.get(bucket)?.get(key)?;
        size.is_none_or(|s| s == f.size).then(|| f.clone())
    }

    /// Where a fill for a read of bytes `first..=last` of `bucket`/`key` (a version of `size`
    /// bytes, or any) should end, exclusive: past `last` only when the read starts a known
    /// chunk.
    pub fn fill_end(
        &self,
        bucket: &str,
        key: &str,
        size: Option<u64>,
        (first, last): (u64, u64),
    ) -> u64 {
        self.get(bucket, key, size)
            .and_then(|f| f.fill_end(first, last))
            .unwrap_or(last.saturating_add(1))
    }

    /// Chunk ranges held.
    pub fn chunks(&self) -> usize {
        self.inner.read().map_or(0, |g| g.chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fc() -> FileChunks {
        FileChunks::new(
            100 << 20,
            [(4, 996), (1000, 30 << 20), (0, 0), (99 << 20, 2 << 20)],
        )
    }

    #[test]
    fn a_read_starting_a_chunk_fills_to_its_end_capped() {
        let f = fc();
        assert_eq!(f.chunks.len(), 2, "empty and out-of-file chunks dropped");
        assert_eq!(f.fill_end(4, 99), Some(1000));
        assert_eq!(f.fill_end(1000, 1999), Some(1000 + MAX_CHUNK_FILL));
        // Not a chunk's start, or the read already covers the chunk.
        assert_eq!(f.fill_end(5, 99), None);
        assert_eq!(f.fill_end(4, 999), None);
        assert_eq!(f.fill_end(1 << 30, (1 << 30) + 1), None);
    }

    #[test]
    fn a_table_is_replaced_whole_and_the_bound_holds() {
        let h = ChunkHints::default();
        let p = h.publish(
            "b",
            "t",
            true,
            vec![("k1".into(), fc()), ("k2".into(), fc())],
        );
        assert_eq!((p.files, p.refused, h.chunks()), (2, 0, 4));
        assert_eq!(h.fill_end("b", "k1", Some(100 << 20), (4, 9)), 1000);
        assert_eq!(
            h.fill_end("b", "k1", Some(1), (4, 9)),
            10,
            "another version's size"
        );
        h.publish("b", "t", true, vec![("k3".into(), fc())]);
        assert!(h.get("b", "k1", None).is_none());
        assert_eq!(h.chunks(), 2);
        let big = FileChunks::new(u64::MAX, (0..MAX_HINT_CHUNKS as u64).map(|i| (i * 2, 1)));
        let p = h.publish("b", "u", false, vec![("huge".into(), big)]);
        assert_eq!((p.files, p.refused, h.chunks()), (0, 1, 2));
    }
}
