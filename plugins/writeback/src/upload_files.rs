//! Multipart uploads on disk, so a node that restarts still has every part it acknowledged:
//! `<dir>/<upload id>/upload.json` holds the key, headers and start time, and `<n>.json` the
//! record of part `n` as staged on this node (its fragments are already durable on w nodes;
//! the record is what names them). Each file is written durably (see [`crate::durable`])
//! before the part's 200; a completion or an abort removes the upload's directory before
//! freeing the parts, so a crash between the two leaves orphan fragments (swept), never an
//! upload naming freed parts.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable;
use crate::journal::Record;
use crate::multipart::{Upload, PREFIX};

const HEAD: &str = "upload.json";

/// What `upload.json` holds.
#[derive(Serialize, Deserialize)]
struct Head {
    #[serde(default)]
    bucket: String,
    key: String,
    headers: Vec<(String, String)>,
    started_ms: u64,
}

/// The uploads directory.
pub struct UploadFiles {
    dir: PathBuf,
}

/// Whether `id` is one Floe handed out (and so a safe directory name): the prefix, then hex.
pub fn is_upload_id(id: &str) -> bool {
    id.strip_prefix(PREFIX)
        .is_some_and(|h| !h.is_empty() && h.len() <= 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn bad_id(id: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not an upload id: {id:?}"),
    )
}

impl UploadFiles {
    /// Opens (creating) `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    fn upload_dir(&self, id: &str) -> io::Result<PathBuf> {
        if !is_upload_id(id) {
            return Err(bad_id(id));
        }
        Ok(self.dir.join(id))
    }

    /// Records upload `id` (once; a second call keeps the first).
    pub fn begin(&self, id: &str, up: &Upload) -> io::Result<()> {
        let d = self.upload_dir(id)?;
        if d.join(HEAD).exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&d)?;
        durable::sync_dir(&self.dir)?;
        let head = Head {
            bucket: up.bucket.clone(),
            key: up.key.clone(),
            headers: up.headers.clone(),
            started_ms: up.started_ms,
        };
        durable::write(&d.join(HEAD), &serde_json::to_vec(&head)?)
    }

    /// Records part `n` of upload `id` (replacing an earlier one).
    pub fn part(&self, id: &str, n: u32, r: &Record) -> io::Result<()> {
        let d = self.upload_dir(id)?;
        durable::write(&d.join(format!("{n}.json")), &serde_json::to_vec(r)?)
    }

    /// Forgets upload `id` (completed or aborted).
    pub fn forget(&self, id: &str) -> io::Result<()> {
        let d = self.upload_dir(id)?;
        match std::fs::remove_dir_all(&d) {
            Ok(()) => durable::sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every upload kept, by id. An unreadable upload is set aside (`*.bad`) with a warning:
    /// its parts' fragments then age into orphans.
    pub fn load(&self) -> io::Result<Vec<(String, Upload)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            let Some(id) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            if !is_upload_id(&id) {
                continue;
            }
            match read_upload(&path) {
                Ok(up) => out.push((id, up)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable multipart upload set aside");
                    std::fs::rename(&path, path.with_extension("bad"))?;
                }
            }
        }
        Ok(out)
    }
}

fn read_upload(dir: &Path) -> io::Result<Upload> {
    let head: Head = serde_json::from_slice(&std::fs::read(dir.join(HEAD))?)?;
    let mut up = Upload {
        bucket: head.bucket,
        key: head.key,
        headers: head.headers,
        parts: Default::default(),
        started_ms: head.started_ms,
    };
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let n = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u32>().ok());
        if let (Some(n), Some("json")) = (n, path.extension().and_then(|x| x.to_str())) {
            let r: Record = serde_json::from_slice(&std::fs::read(&path)?)?;
            up.parts.insert(n, std::sync::Arc::new(r));
        }
    }
    Ok(up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::sample;

    fn upload(key: &str) -> Upload {
        Upload {
            bucket: "b".into(),
            key: key.into(),
            headers: vec![("content-type".into(), "application/x-parquet".into())],
            parts: Default::default(),
            started_ms: 7,
        }
    }

    #[test]
    fn uploads_and_their_parts_come_back_after_a_restart_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let files = UploadFiles::open(dir.path()).unwrap();
        let (a, b) = (format!("{PREFIX}00aa"), format!("{PREFIX}00bb"));
        files.begin(&a, &upload("t/a.parquet")).unwrap();
        files.begin(&b, &upload("t/b.parquet")).unwrap();
        files
            .part(&a, 2, &sample("t/a.parquet", 5, "\"e2\"", 1))
            .unwrap();
        files
            .part(&a, 1, &sample("t/a.parquet", 9, "\"old\"", 1))
            .unwrap();
        files
            .part(&a, 1, &sample("t/a.parquet", 9, "\"e1\"", 2))
            .unwrap();
        files.forget(&b).unwrap();
        let back = UploadFiles::open(dir.path()).unwrap().load().unwrap();
        assert_eq!(back.len(), 1);
        let (id, up) = &back[0];
        assert_eq!(
            (id.as_str(), up.key.as_str(), up.started_ms),
            (a.as_str(), "t/a.parquet", 7)
        );
        let etags: Vec<_> = up
            .parts
            .iter()
            .map(|(n, r)| (*n, r.etag.as_str()))
            .collect();
        assert_eq!(etags, [(1, "\"e1\""), (2, "\"e2\"")]);
        assert_eq!(up.headers, upload("x").headers);
    }

    #[test]
    fn an_id_that_is_not_floes_never_becomes_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let files = UploadFiles::open(dir.path()).unwrap();
        for id in [
            "../x",
            "floe-wb-../../etc",
            "floe-wb-",
            "other",
            "floe-wb-zz",
        ] {
            assert!(!is_upload_id(id), "{id}");
            assert!(files.begin(id, &upload("k")).is_err());
            assert!(files.forget(id).is_err());
        }
        assert!(is_upload_id(&format!("{PREFIX}0123abcdef")));
    }
}
