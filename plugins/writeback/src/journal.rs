//! The write-back journal: one durable JSON record per acknowledged, unpropagated write. The
//! coordinator writes it at the w-th fsync report; copies go to the fragment nodes, so losing
//! the coordinator's disk loses nothing; it replays after a restart; it is removed once the
//! origin confirmed the object.
//!
//! The acknowledgment is structural: a client hears 200 only through an [`Acked`], which only
//! [`Journal::commit`] makes, from a [`Quorum`], which only [`Quorum::count`] makes, from at
//! least `w` fsync reports of distinct fragments on distinct nodes.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codec::Geometry;
use crate::durable;
use crate::fragments::FsyncReport;
use crate::id::ObjectId;

/// Where one fragment of a write is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Fragment index.
    pub index: u8,
    /// The node's id.
    pub node: String,
    /// The node's peer address when the fragment was placed.
    pub addr: String,
}

/// One part of a write a client completed from parts: its size and its quoted MD5 ETag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Bytes in the part.
    pub size: u64,
    /// The part's ETag (quoted MD5 of its bytes).
    pub etag: String,
}

impl Part {
    /// What an origin upload of the part needs: its length and MD5 (`None`: an ETag that is no
    /// MD5, which a staged part never has).
    pub fn span(&self) -> Option<floe_core::PartSpan> {
        let md5 = crate::etag::md5_of(&self.etag)?;
        Some(floe_core::PartSpan {
            len: self.size,
            md5,
        })
    }
}

/// The origin-upload spans of `parts`, or an error naming the part that has no MD5 ETag.
pub fn spans(parts: &[Part]) -> Result<Vec<floe_core::PartSpan>, floe_core::OriginError> {
    parts
        .iter()
        .map(|p| {
            p.span().ok_or_else(|| {
                floe_core::OriginError::Transport(format!("part ETag {} is not an MD5", p.etag))
            })
        })
        .collect()
}

/// One acknowledged write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The write's id.
    pub id: ObjectId,
    /// Bucket and key written.
    pub bucket: String,
    /// The key.
    pub key: String,
    /// The ETag answered to the client (quoted MD5 of the body, as S3 answers a PutObject).
    pub etag: String,
    /// Headers stored with the object (content-type, x-amz-meta-*, ...), lowercase names.
    pub headers: Vec<(String, String)>,
    /// Coding geometry.
    pub geometry: Geometry,
    /// Fragments whose fsync was reported.
    pub placements: Vec<Placement>,
    /// The node that acknowledged it.
    pub coordinator: String,
    /// When it was acknowledged (ms since the epoch): a later write of the key wins.
    pub acked_ms: u64,
    /// The parts it was completed from, in order (none: a PutObject). Propagation uploads the
    /// same parts, so the origin's ETag is `etag`, S3's multipart ETag of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    /// How many fragment nodes besides the coordinator keep this record before the write is
    /// acknowledged (the coordinator waits for them): a node replaying it that finds fewer
    /// nodes that could hold it knows no client was told it landed (see
    /// [`crate::catch_up`]). 0: a record from before that rule, never judged so.
    #[serde(default)]
    pub copies: u8,
}

/// At least `w` fsync reports of distinct fragments on distinct nodes.
#[derive(Debug)]
pub struct Quorum(Vec<FsyncReport>);

/// Why reports do not make a quorum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{got} durable fragments, {want} needed")]
pub struct Shortfall {
    /// Distinct reports.
    pub got: usize,
    /// The threshold.
    pub want: usize,
}

impl Quorum {
    /// Counts `reports` (duplicates of an index or of a node count once) against `w`.
    pub fn count(reports: Vec<FsyncReport>, w: usize) -> Result<Self, Shortfall> {
        let (mut idx, mut nodes) = (BTreeSet::new(), BTreeSet::new());
        let kept: Vec<FsyncReport> = reports
            .into_iter()
            .filter(|r| idx.insert(r.index) & nodes.insert(r.node.clone()))
            .collect();
        if kept.len() < w.max(1) {
            return Err(Shortfall {
                got: kept.len(),
                want: w,
            });
        }
        Ok(Self(kept))
    }

    /// The reports counted.
    pub fn reports(&self) -> &[FsyncReport] {
        &self.0
    }
}

/// A write journaled durably after its quorum: the only way to acknowledge it.
#[derive(Debug)]
pub struct Acked {
    /// The record as journaled.
    pub record: Record,
}

/// Milliseconds since the epoch: the clock of `acked_ms` and of uploads' start times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long a freed write's tombstone is kept: longer than any node stays away and still
/// rejoins with its copies (the orphan sweep frees fragments left that long, 7 days).
pub const TOMBSTONE_KEEP: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A node's journal directory (its own records, the copies it keeps for other nodes, and the
/// tombstones of writes freed).
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// The directory its records are in.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Opens (creating) the journal in `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    fn path(&self, id: &ObjectId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Journals `record` once `quorum` holds: the record's placements become the reported
    /// ones, and it is fsynced before this returns.
    pub fn commit(&self, mut record: Record, quorum: Quorum) -> io::Result<Acked> {
        record.placements.retain(|p| {
            quorum
                .reports()
                .iter()
                .any(|r| r.index == p.index && r.node == p.node)
        });
        self.keep(&record)?;
        Ok(Acked { record })
    }

    /// Writes `record` durably (a copy from a coordinator, or an update after repair).
    pub fn keep(&self, record: &Record) -> io::Result<()> {
        if self.is_freed(&record.id) {
            return Err(io::Error::other(
                "this write was freed: it is never kept again",
            ));
        }
        let doc = serde_json::to_vec(record).map_err(io::Error::other)?;
        durable::write(&self.path(&record.id), &doc)
    }

    /// Whether a record of `id` is kept.
    pub fn has(&self, id: &ObjectId) -> bool {
        self.path(id).exists()
    }

    /// Forgets `id` (propagated).
    pub fn remove(&self, id: &ObjectId) -> io::Result<()> {
        durable::remove(&self.path(id))
    }

    fn tombstone_path(&self, id: &ObjectId) -> PathBuf {
        self.dir.join(format!("{id}.freed"))
    }

    /// Marks `id` freed for good (propagated, overtaken or deleted), durably: a copy a node
    /// away at the time hands back later is dropped, never indexed, served or uploaded again
    /// (the deleted object would come back). Kept [`TOMBSTONE_KEEP`].
    pub fn tombstone(&self, id: &ObjectId) -> io::Result<()> {
        durable::write(&self.tombstone_path(id), b"")
    }

    /// Whether `id` was freed here.
    pub fn is_freed(&self, id: &ObjectId) -> bool {
        self.tombstone_path(id).exists()
    }

    /// Every id freed here within [`TOMBSTONE_KEEP`]; older tombstones are removed.
    pub fn freed(&self) -> io::Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            if path.extension().and_then(|x| x.to_str()) != Some("freed") {
                continue;
            }
            let age = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok());
            if age.is_some_and(|a| a > TOMBSTONE_KEEP) {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let stem = path.file_stem().and_then(|x| x.to_str());
            if let Some(id) = stem.and_then(ObjectId::parse) {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Every record kept. An unreadable file is set aside as `*.bad` (with a warning), never
    /// dropped: it names a write that may still need propagating.
    pub fn replay(&self) -> io::Result<Vec<Record>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            match serde_json::from_slice::<Record>(&std::fs::read(&path)?) {
                Ok(r) => out.push(r),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable journal record set aside");
                    std::fs::rename(&path, path.with_extension("bad"))?;
                }
            }
        }
        out.sort_by_key(|r| r.acked_ms);
        Ok(out)
    }
}

/// A record for tests: `key`, `size` bytes, ETag `etag`, acknowledged at `acked_ms`.
#[cfg(test)]
pub(crate) fn sample(key: &str, size: u64, etag: &str, acked_ms: u64) -> Record {
    Record {
        id: ObjectId::random(),
        bucket: "b".into(),
        key: key.into(),
        etag: etag.into(),
        headers: Vec::new(),
        geometry: crate::codec::Geometry {
            k: 2,
            m: 1,
            stripe_bytes: 1 << 20,
            size,
        },
        placements: Vec::new(),
        coordinator: "n".into(),
        acked_ms,
        parts: Vec::new(),
        copies: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(index: u8, node: &str) -> FsyncReport {
        FsyncReport::answered(index, node.into(), 10)
    }

    fn record(id: ObjectId) -> Record {
        Record {
            id,
            bucket: "b".into(),
            key: "k".into(),
            etag: "\"e\"".into(),
            headers: vec![("content-type".into(), "text/plain".into())],
            geometry: Geometry {
                k: 2,
                m: 1,
                stripe_bytes: 1 << 20,
                size: 10,
            },
            placements: (0..3)
                .map(|i| Placement {
                    index: i,
                    node: format!("n{i}"),
                    addr: "a".into(),
                })
                .collect(),
            coordinator: "n0".into(),
            acked_ms: 1,
            parts: Vec::new(),
            copies: 0,
        }
    }

    #[test]
    fn a_quorum_counts_distinct_fragments_on_distinct_nodes() {
        let two_on_one_node = vec![report(0, "a"), report(1, "a"), report(0, "b")];
        assert_eq!(
            Quorum::count(two_on_one_node, 2).unwrap_err(),
            Shortfall { got: 1, want: 2 }
        );
        assert!(Quorum::count(vec![report(0, "a"), report(1, "b")], 2).is_ok());
        assert!(
            Quorum::count(Vec::new(), 0).is_err(),
            "never an empty quorum"
        );
    }

    #[test]
    fn a_committed_record_replays_with_only_the_reported_placements() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::open(d.path()).unwrap();
        let id = ObjectId::random();
        let q = Quorum::count(vec![report(0, "n0"), report(2, "n2")], 2).unwrap();
        let acked = j.commit(record(id), q).unwrap();
        assert_eq!(acked.record.placements.len(), 2);
        std::fs::write(d.path().join("junk.json"), b"{not json").unwrap();
        let back = Journal::open(d.path()).unwrap().replay().unwrap();
        assert_eq!(back, vec![acked.record]);
        assert!(d.path().join("junk.bad").exists(), "set aside, not lost");
        j.remove(&id).unwrap();
        assert!(j.replay().unwrap().is_empty());
    }

    #[test]
    fn a_freed_write_is_never_kept_again_and_its_tombstone_is_listed_not_replayed() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::open(d.path()).unwrap();
        let (freed, other) = (ObjectId::random(), ObjectId::random());
        j.keep(&record(freed)).unwrap();
        j.tombstone(&freed).unwrap();
        j.remove(&freed).unwrap();
        assert!(j.is_freed(&freed) && !j.is_freed(&other));
        assert!(
            j.keep(&record(freed)).is_err(),
            "a copy handed back late is refused"
        );
        assert!(!j.has(&freed));
        j.keep(&record(other)).unwrap();
        assert_eq!(j.freed().unwrap(), vec![freed]);
        let replayed: Vec<ObjectId> = j.replay().unwrap().iter().map(|r| r.id).collect();
        assert_eq!(replayed, vec![other]);
    }
}
