//! Durable files: every write-back file (a fragment, a journal record) is written beside its
//! final name, fsynced, renamed into place, and its directory fsynced, so a crash leaves
//! either the whole file or none of it, and a reported write survives power loss.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The temporary name a file is written under before it is renamed into place.
pub fn partial(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".part");
    PathBuf::from(p)
}

/// Fsyncs directory `dir` (a rename or unlink in it is then durable).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Fsyncs `path`, renames it to `to` and fsyncs their directory.
pub fn commit(path: &Path, to: &Path) -> io::Result<()> {
    OpenOptions::new().write(true).open(path)?.sync_all()?;
    std::fs::rename(path, to)?;
    sync_dir(to.parent().unwrap_or(Path::new(".")))
}

/// Writes `bytes` to `path` durably (see the module docs).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = partial(path);
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Removes `path` durably; a file already gone is not an error.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(path.parent().unwrap_or(Path::new("."))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_write_leaves_no_partial_file_and_remove_is_idempotent() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a");
        write(&p, b"hello").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        assert!(!partial(&p).exists());
        remove(&p).unwrap();
        remove(&p).unwrap();
        assert!(!p.exists());
    }
}
