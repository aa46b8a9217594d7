//! Multipart uploads on a write-back route. Arrow's S3 writer (PyIceberg, Polars, DuckDB's
//! Arrow path) uploads every file as a multipart upload, so staging only PutObject would leave
//! most engine writes on the origin's latency.
//!
//! How parts are staged, and why: each UploadPart is staged like a write (erasure-coded,
//! acknowledged after w fsyncs) but not journaled; CompleteMultipartUpload re-reads the parts
//! in order, encodes them as one object and journals that, then frees the parts. The
//! completed object is then an ordinary staged write: one record, one geometry, read, repaired
//! and propagated (as one PUT, with Content-MD5) by the same code as a PutObject. The cost is
//! reading and re-encoding the parts once at completion, local-disk and loopback work. Each
//! node keeps the uploads it was asked about and the parts it staged, in memory and on disk
//! (see [`crate::upload_files`]: a restart forgets no acknowledged part); calls for one
//! upload may land on any node (see [`crate::fleet_uploads`]). An upload left incomplete for
//! `orphan_after_ms` is aborted by the scrub (see [`crate::sweep`]), as an S3 lifecycle rule
//! AbortIncompleteMultipartUpload would.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{ByteStream, S3Error, S3ErrorCode};

use crate::journal::Record;
use crate::node::Node;
use crate::read::RecordStream;
use crate::stage::BodySource;
use crate::upload_files::UploadFiles;

/// Upload ids Floe hands out start with this (others pass to the origin).
pub const PREFIX: &str = "floe-wb-";

/// One upload in progress.
#[derive(Clone)]
pub struct Upload {
    /// Bucket.
    pub bucket: String,
    /// Key.
    pub key: String,
    /// Headers of the CreateMultipartUpload, kept with the object.
    pub headers: Vec<(String, String)>,
    /// Staged parts by number.
    pub parts: BTreeMap<u32, Arc<Record>>,
    /// When it was created (ms since the epoch).
    pub started_ms: u64,
}

/// The uploads in progress on this node, kept on disk when it has a write-back directory.
#[derive(Default)]
pub struct Uploads {
    map: Mutex<HashMap<String, Upload>>,
    files: Option<UploadFiles>,
}

impl Upload {
    /// A new upload of `bucket`/`key`, started now.
    pub fn new(bucket: &str, key: &str, headers: Vec<(String, String)>) -> Self {
        Self {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            headers,
            parts: BTreeMap::new(),
            started_ms: crate::journal::now_ms(),
        }
    }
}

fn io_error(e: io::Error) -> S3Error {
    S3Error::new(
        S3ErrorCode::InternalError,
        "The upload could not be recorded.",
    )
    .caused_by(e)
}

fn no_such_upload() -> S3Error {
    S3Error::new(
        S3ErrorCode::NoSuchUpload,
        "The specified upload does not exist.",
    )
}

impl Uploads {
    /// The uploads kept in `files`, read back.
    pub fn on_disk(files: UploadFiles) -> io::Result<Self> {
        let map = files.load()?.into_iter().collect();
        Ok(Self {
            map: Mutex::new(map),
            files: Some(files),
        })
    }

    /// How many uploads this node knows.
    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |u| u.len())
    }

    /// Whether this node knows no upload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts `up`; its id. Blocking: it is on disk when this returns.
    pub fn create(&self, up: Upload) -> Result<String, S3Error> {
        let id = format!("{PREFIX}{}", crate::id::ObjectId::random());
        if let Some(f) = &self.files {
            f.begin(&id, &up).map_err(io_error)?;
        }
        if let Ok(mut u) = self.map.lock() {
            u.insert(id.clone(), up);
        }
        Ok(id)
    }

    /// Whether `id` is an upload of `key` here.
    pub fn has(&self, id: &str, key: &str) -> bool {
        self.map
            .lock()
            .is_ok_and(|u| u.get(id).is_some_and(|up| up.key == key))
    }

    /// Records part `n`; the part it replaced, if any (to free). Blocking: the part is on
    /// disk when this returns.
    pub fn put_part(&self, id: &str, n: u32, part: Record) -> Result<Option<Arc<Record>>, S3Error> {
        if let Some(f) = &self.files {
            let up = self.shell(id).ok_or_else(no_such_upload)?;
            f.begin(id, &up).map_err(io_error)?;
            f.part(id, n, &part).map_err(io_error)?;
        }
        let mut u = self.map.lock().map_err(|_| no_such_upload())?;
        let up = u.get_mut(id).ok_or_else(no_such_upload)?;
        Ok(up.parts.insert(n, Arc::new(part)))
    }

    /// Upload `id` without its parts.
    fn shell(&self, id: &str) -> Option<Upload> {
        let u = self.map.lock().ok()?;
        let up = u.get(id)?;
        Some(Upload {
            parts: BTreeMap::new(),
            ..up.clone()
        })
    }

    /// Knows upload `id` as a peer described it in `up` (its parts stay the peer's; it is
    /// written to disk with the first part staged here).
    pub fn adopt(&self, id: &str, mut up: Upload) {
        up.parts.clear();
        if up.started_ms == 0 {
            up.started_ms = crate::journal::now_ms();
        }
        if let Ok(mut u) = self.map.lock() {
            u.entry(id.to_owned()).or_insert(up);
        }
    }

    /// (id, key, started) of the uploads of `bucket` this node knows.
    pub fn listing(&self, bucket: &str) -> Vec<(String, String, u64)> {
        self.map.lock().map_or_else(
            |_| Vec::new(),
            |u| {
                u.iter()
                    .filter(|(_, up)| up.bucket == bucket)
                    .map(|(id, up)| (id.clone(), up.key.clone(), up.started_ms))
                    .collect()
            },
        )
    }

    /// Ids of the uploads started before `ms`.
    pub fn started_before(&self, ms: u64) -> Vec<String> {
        self.map.lock().map_or_else(
            |_| Vec::new(),
            |u| {
                u.iter()
                    .filter(|(_, up)| up.started_ms < ms)
                    .map(|(id, _)| id.clone())
                    .collect()
            },
        )
    }

    /// Whether a part staged here has fragments of write `id` (they are not orphans).
    pub fn holds(&self, id: &crate::id::ObjectId) -> bool {
        self.map
            .lock()
            .is_ok_and(|u| u.values().any(|up| up.parts.values().any(|r| r.id == *id)))
    }

    /// Upload `id` as this node knows it (its parts: those staged here).
    pub fn get(&self, id: &str) -> Option<Upload> {
        self.map.lock().ok()?.get(id).cloned()
    }

    /// Takes the upload out (completion or abort), off the disk first. Blocking.
    pub fn take(&self, id: &str) -> Option<Upload> {
        if let Some(f) = &self.files {
            if let Err(e) = f.forget(id) {
                tracing::warn!(id, error = %e, "a finished upload's files stay (its parts are swept later)");
            }
        }
        self.map.lock().ok()?.remove(id)
    }
}

/// The (part number, ETag) list of a CompleteMultipartUpload body.
pub fn parse_complete(xml: &str) -> Result<Vec<(u32, String)>, S3Error> {
    let bad = || {
        S3Error::new(S3ErrorCode::MalformedXML, "The XML you provided was not well-formed or did not validate against our published schema.")
    };
    let mut out = Vec::new();
    for part in xml.split("<Part>").skip(1) {
        let field = |name: &str| {
            let open = format!("<{name}>");
            let close = format!("</{name}>");
            let i = part.find(&open)? + open.len();
            let j = part[i..].find(&close)? + i;
            Some(part[i..j].trim().to_owned())
        };
        let n = field("PartNumber")
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        let etag = field("ETag")
            .ok_or_else(bad)?
            .replace("&quot;", "\"")
            .replace("&#34;", "\"");
        out.push((n, etag.trim_matches('"').to_owned()));
    }
    if out.is_empty() {
        return Err(bad());
    }
    if out.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(S3Error::new(
            S3ErrorCode::InvalidPartOrder,
            "The list of parts was not in ascending order.",
        ));
    }
    Ok(out)
}

/// The smallest part S3 takes in a completed upload, except the last: an origin refuses
/// smaller ones (EntityTooSmall), so propagating them as the same parts could never land.
pub const MIN_PART: u64 = 5 << 20;

/// The parts `chosen` of `up`, checked against the staged ones and S3's minimum part size.
pub fn chosen_parts(up: &Upload, chosen: &[(u32, String)]) -> Result<Vec<Arc<Record>>, S3Error> {
    let parts: Vec<Arc<Record>> = chosen
        .iter()
        .map(|(n, etag)| match up.parts.get(n) {
            Some(p) if p.etag.trim_matches('"') == etag => Ok(p.clone()),
            _ => Err(S3Error::new(
                S3ErrorCode::InvalidPart,
                format!("Part {n} was not uploaded or its ETag differs."),
            )),
        })
        .collect::<Result<_, _>>()?;
    let but_last = parts.len().saturating_sub(1);
    if parts[..but_last].iter().any(|p| p.geometry.size < MIN_PART) {
        return Err(S3Error::new(
            S3ErrorCode::EntityTooSmall,
            "Your proposed upload is smaller than the minimum allowed object size.",
        ));
    }
    Ok(parts)
}

/// What a completed write records of its parts: each one's size and ETag, in order.
pub fn spans(parts: &[Arc<Record>]) -> Vec<crate::journal::Part> {
    parts
        .iter()
        .map(|p| crate::journal::Part {
            size: p.geometry.size,
            etag: p.etag.clone(),
        })
        .collect()
}

/// The parts' bytes in order, as one body.
pub struct PartsBody {
    node: Arc<Node>,
    parts: std::vec::IntoIter<Arc<Record>>,
    current: Option<RecordStream>,
}

impl PartsBody {
    /// The bytes of `parts`, in order.
    pub fn new(node: Arc<Node>, parts: Vec<Arc<Record>>) -> Self {
        Self {
            node,
            parts: parts.into_iter(),
            current: None,
        }
    }
}

#[async_trait]
impl ByteStream for PartsBody {
    async fn next(&mut self) -> Result<Option<Bytes>, floe_core::OriginError> {
        loop {
            if let Some(s) = self.current.as_mut() {
                if let Some(b) = s.next().await? {
                    return Ok(Some(b));
                }
                self.current = None;
            }
            let Some(p) = self.parts.next() else {
                return Ok(None);
            };
            let size = p.geometry.size;
            if size > 0 {
                self.current = Some(self.node.range(p, 0, size - 1));
            }
        }
    }
}

#[async_trait]
impl BodySource for PartsBody {
    async fn next(&mut self) -> Result<Option<Bytes>, S3Error> {
        ByteStream::next(self).await.map_err(|e| {
            S3Error::new(
                S3ErrorCode::InternalError,
                "A staged part could not be read.",
            )
            .caused_by(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_body_lists_parts_in_order_or_is_refused() {
        let body = "<CompleteMultipartUpload><Part><ETag>&quot;a1&quot;</ETag><PartNumber>1</PartNumber></Part><Part><PartNumber>2</PartNumber><ETag>\"b2\"</ETag></Part></CompleteMultipartUpload>";
        assert_eq!(
            parse_complete(body).unwrap(),
            [(1, "a1".to_owned()), (2, "b2".to_owned())]
        );
        let swapped = body.replace(">1<", ">3<");
        assert_eq!(
            parse_complete(&swapped).unwrap_err().code,
            S3ErrorCode::InvalidPartOrder
        );
        assert_eq!(
            parse_complete("<x/>").unwrap_err().code,
            S3ErrorCode::MalformedXML
        );
    }
}
