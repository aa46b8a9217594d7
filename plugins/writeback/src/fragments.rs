//! A node's fragment store: one file per (object id, fragment index) under `dir`, within a
//! byte ceiling reserved before a fragment is received. A fragment counts toward a write's
//! quorum only through [`FsyncReport`], which only [`FragmentWriter::finish`] makes, after
//! the file and its directory were fsynced. Blocking I/O: call it off the async threads.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::durable;
use crate::id::ObjectId;

/// Proof that a fragment's file and its directory were fsynced (a durability report, not a
/// receipt). Made only by [`FragmentWriter::finish`], or by the peer client from a node's
/// answer to a commit, which that node sends only after its own `finish`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsyncReport {
    /// The fragment's index.
    pub index: u8,
    /// The node that holds it.
    pub node: String,
    /// Its length.
    pub len: u64,
}

impl FsyncReport {
    /// A report a node answered to a commit (see [`FsyncReport`]).
    pub(crate) fn answered(index: u8, node: String, len: u64) -> Self {
        Self { index, node, len }
    }
}

/// The fragment store.
pub struct Fragments {
    dir: PathBuf,
    ceiling: u64,
    used: Arc<AtomicU64>,
}

/// Bytes reserved for one fragment; given back when dropped unless the fragment was kept.
pub struct Reservation {
    used: Arc<AtomicU64>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A fragment being received, its pieces in any order (a coordinator keeps several in
/// flight), each written at its offset; shared between the calls carrying them.
pub struct FragmentWriter {
    file: Option<File>,
    tmp: PathBuf,
    path: PathBuf,
    index: u8,
    node: String,
    len: u64,
    /// The pieces received: offset -> end, never overlapping.
    pieces: Mutex<BTreeMap<u64, u64>>,
    reservation: Option<Reservation>,
}

impl Fragments {
    /// Opens (creating) the store in `dir`: leftovers of interrupted receives are removed and
    /// the kept fragments count against `ceiling`.
    pub fn open(dir: &Path, ceiling: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut used = 0;
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_name().to_string_lossy().ends_with(".part") {
                std::fs::remove_file(e.path())?;
            } else {
                used += e.metadata()?.len();
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            ceiling,
            used: Arc::new(AtomicU64::new(used)),
        })
    }

    /// Bytes kept or reserved.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The ceiling.
    pub fn ceiling(&self) -> u64 {
        self.ceiling
    }

    fn path(&self, id: &ObjectId, index: u8) -> PathBuf {
        self.dir.join(format!("{id}.{index}"))
    }

    /// Reserves `bytes`, or none when that would pass the ceiling.
    pub fn reserve(&self, bytes: u64) -> Option<Reservation> {
        let ok = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u + bytes <= self.ceiling).then_some(u + bytes)
            })
            .is_ok();
        ok.then(|| Reservation {
            used: self.used.clone(),
            bytes,
        })
    }

    /// Starts receiving fragment `index` of `id`, `len` bytes, reserved in `reservation`;
    /// `node` is this node's id (named in the report).
    pub fn writer(
        &self,
        id: &ObjectId,
        index: u8,
        len: u64,
        node: &str,
        reservation: Reservation,
    ) -> io::Result<FragmentWriter> {
        let path = self.path(id, index);
        let tmp = durable::partial(&path);
        Ok(FragmentWriter {
            file: Some(File::create(&tmp)?),
            tmp,
            path,
            index,
            node: node.to_owned(),
            len,
            pieces: Mutex::default(),
            reservation: Some(reservation),
        })
    }

    /// Every kept fragment (not the ones being received) with its file's age.
    pub fn list(&self) -> io::Result<Vec<(ObjectId, u8, std::time::Duration)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((id, index)) = name.split_once('.') else {
                continue;
            };
            let (Some(id), Ok(index)) = (ObjectId::parse(id), index.parse::<u8>()) else {
                continue; // a partial file (`<id>.<n>.part`) or a stranger
            };
            let age = e.metadata()?.modified()?.elapsed().unwrap_or_default();
            out.push((id, index, age));
        }
        Ok(out)
    }

    /// `len` bytes of fragment `index` of `id` from `offset`.
    pub fn read(&self, id: &ObjectId, index: u8, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut f = File::open(self.path(id, index))?;
        f.seek(SeekFrom::Start(offset))?;
        let mut out = Vec::new();
        f.take(len).read_to_end(&mut out)?;
        Ok(out)
    }

    /// Whether fragment `index` of `id` is kept here.
    pub fn has(&self, id: &ObjectId, index: u8) -> bool {
        self.path(id, index).exists()
    }

    /// Frees fragment `index` of `id` (a missing one is not an error).
    pub fn remove(&self, id: &ObjectId, index: u8) -> io::Result<()> {
        let path = self.path(id, index);
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        durable::remove(&path)?;
        if len > 0 {
            self.used.fetch_sub(len.min(self.used()), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Overwrites byte `at` of a kept fragment (tests of corruption handling).
    pub fn corrupt(&self, id: &ObjectId, index: u8, at: u64) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(id, index))?;
        let mut b = [0u8; 1];
        f.seek(SeekFrom::Start(at))?;
        f.read_exact(&mut b)?;
        f.seek(SeekFrom::Start(at))?;
        f.write_all(&[b[0] ^ 0xff])
    }
}

impl FragmentWriter {
    /// Its announced length.
    pub fn announced(&self) -> u64 {
        self.len
    }

    /// Bytes received so far.
    pub fn written(&self) -> u64 {
        self.pieces
            .lock()
            .map_or(0, |p| p.iter().map(|(o, e)| e - o).sum())
    }

    /// Writes the piece at `off`: refused past the announced length, or overlapping a piece
    /// already received (a repeated piece).
    pub fn write_at(&self, off: u64, bytes: &[u8]) -> io::Result<()> {
        let end = off.saturating_add(bytes.len() as u64);
        if end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "fragment longer than announced",
            ));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let Some(f) = self.file.as_ref() else {
            return Err(io::Error::other("fragment already finished"));
        };
        {
            let mut p = self
                .pieces
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?;
            if p.range(..end).next_back().is_some_and(|(_, e)| *e > off) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "fragment piece repeated or overlapping",
                ));
            }
            p.insert(off, end);
        }
        f.write_all_at(bytes, off).inspect_err(|_| {
            if let Ok(mut p) = self.pieces.lock() {
                p.remove(&off);
            }
        })
    }

    /// Fsyncs the whole fragment into place (file, rename, directory) and reports it.
    pub fn finish(mut self) -> io::Result<FsyncReport> {
        let written = self.written();
        if written != self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("fragment {written} of {} bytes", self.len),
            ));
        }
        if let Some(f) = self.file.take() {
            f.sync_all()?;
        }
        durable::commit(&self.tmp, &self.path)?;
        // Kept: the bytes stay counted in `used` until the fragment is removed.
        std::mem::forget(self.reservation.take());
        Ok(FsyncReport {
            index: self.index,
            node: std::mem::take(&mut self.node),
            len: self.len,
        })
    }
}

impl Drop for FragmentWriter {
    fn drop(&mut self) {
        // Not finished (finish renamed it away first): the partial file goes.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fragment_counts_only_once_finished_and_the_ceiling_holds() {
        let d = tempfile::tempdir().unwrap();
        let s = Fragments::open(d.path(), 100).unwrap();
        let id = ObjectId::random();
        let r = s.reserve(60).unwrap();
        assert!(s.reserve(60).is_none(), "over the ceiling");
        let w = s.writer(&id, 3, 10, "n1", r).unwrap();
        w.write_at(6, b"6789").unwrap();
        assert!(w.write_at(5, b"56").is_err(), "overlaps a piece");
        w.write_at(0, b"012345").unwrap();
        assert!(!s.has(&id, 3));
        let rep = w.finish().unwrap();
        assert_eq!((rep.index, rep.len, rep.node.as_str()), (3, 10, "n1"));
        assert_eq!(s.read(&id, 3, 2, 4).unwrap(), b"2345");
        s.remove(&id, 3).unwrap();
        assert!(!s.has(&id, 3));
    }

    #[test]
    fn an_unfinished_fragment_leaves_nothing_and_frees_its_reservation() {
        let d = tempfile::tempdir().unwrap();
        let s = Fragments::open(d.path(), 100).unwrap();
        let id = ObjectId::random();
        let w = s.writer(&id, 0, 10, "n", s.reserve(10).unwrap()).unwrap();
        w.write_at(0, b"012").unwrap();
        assert!(
            w.write_at(3, b"0123456789").is_err(),
            "longer than announced"
        );
        assert!(w.finish().is_err(), "short");
        assert_eq!(s.used(), 0);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let reopened = Fragments::open(d.path(), 100).unwrap();
        assert_eq!(reopened.used(), 0);
    }
}
