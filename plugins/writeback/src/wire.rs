//! Every write-back call between nodes, as one enum: the caller builds a [`Call`], this file
//! encodes it as a peer call (method, path and query below `/v2/x/wb`) and decodes it on the
//! answering node. No other file spells a path.

use bytes::Bytes;
use floe_core::fleet::PeerCall;
use floe_core::uri::{decode_strict, unique_pairs, uri_encode};

use crate::id::ObjectId;

/// One write-back call. The body, where a call has one, travels beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `PUT /frag`: the body is bytes `off..` of fragment `idx` of write `id`, announced `len`
    /// bytes long.
    PutFragment {
        id: ObjectId,
        idx: u8,
        len: u64,
        off: u64,
    },
    /// `POST /commit`: fsync fragment `idx` of `id` into place; answers the node's id.
    CommitFragment { id: ObjectId, idx: u8 },
    /// `GET /frag`: bytes `off..off + len` of fragment `idx` of `id`.
    ReadFragment {
        id: ObjectId,
        idx: u8,
        off: u64,
        len: u64,
    },
    /// `DELETE /frag`: free fragments `idx` of `id` (a repair replacing them).
    FreeFragments { id: ObjectId, idx: Vec<u8> },
    /// `DELETE /obj`: free every fragment and journal copy of `id`; `at_origin`: freed because
    /// the origin holds it (not overtaken).
    FreeWrite { id: ObjectId, at_origin: bool },
    /// `PUT /journal`: keep a copy of the coordinator's journal record (the body, as JSON).
    KeepJournal,
    /// `GET /journal`: 200 while a record of `id` is kept, 410 once freed, else 404.
    HasJournal { id: ObjectId },
    /// `GET /journals`: every record kept (catch-up).
    Journals,
    /// `GET /freed`: the ids freed here (catch-up).
    Freed,
    /// `POST /flush`: propagate staged write `id` to the origin now.
    Flush { id: ObjectId },
    /// `GET /upload`: this node's view of multipart upload `id`.
    Upload { id: String },
    /// `DELETE /upload`: forget multipart upload `id`.
    DropUpload { id: String },
    /// `GET /uploads`: the multipart uploads of `bucket` open here.
    Uploads { bucket: String },
    /// `GET /staged`: the records of the writes of `bucket` (of `key` only, when given) this
    /// node indexes, as JSON.
    Staged { bucket: String, key: Option<String> },
}

/// Why a peer call is not a write-back call (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a write-back call: {0}")]
pub struct WireError(String);

impl Call {
    /// The HTTP method.
    pub fn method(&self) -> &'static str {
        match self {
            Call::PutFragment { .. } | Call::KeepJournal => "PUT",
            Call::CommitFragment { .. } | Call::Flush { .. } => "POST",
            Call::FreeFragments { .. } | Call::FreeWrite { .. } | Call::DropUpload { .. } => {
                "DELETE"
            }
            _ => "GET",
        }
    }

    /// The path and query.
    pub fn path(&self) -> String {
        match self {
            Call::PutFragment { id, idx, len, off } => {
                format!("/frag?id={id}&idx={idx}&len={len}&off={off}")
            }
            Call::CommitFragment { id, idx } => format!("/commit?id={id}&idx={idx}"),
            Call::ReadFragment { id, idx, off, len } => {
                format!("/frag?id={id}&idx={idx}&off={off}&len={len}")
            }
            Call::FreeFragments { id, idx } => {
                let list: Vec<String> = idx.iter().map(u8::to_string).collect();
                format!("/frag?id={id}&idx={}", list.join(","))
            }
            Call::FreeWrite { id, at_origin } => {
                format!(
                    "/obj?id={id}{}",
                    if *at_origin { "&at_origin=1" } else { "" }
                )
            }
            Call::KeepJournal => "/journal".into(),
            Call::HasJournal { id } => format!("/journal?id={id}"),
            Call::Journals => "/journals".into(),
            Call::Freed => "/freed".into(),
            Call::Flush { id } => format!("/flush?id={id}"),
            Call::Upload { id } | Call::DropUpload { id } => {
                format!("/upload?id={}", uri_encode(id, false))
            }
            Call::Uploads { bucket } => format!("/uploads?bucket={}", uri_encode(bucket, false)),
            Call::Staged { bucket, key } => {
                let mut path = format!("/staged?bucket={}", uri_encode(bucket, false));
                if let Some(k) = key {
                    path.push_str("&key=");
                    path.push_str(&uri_encode(k, false));
                }
                path
            }
        }
    }

    /// The peer call carrying `self` and `body`.
    pub fn with_body(&self, body: Bytes) -> PeerCall {
        PeerCall {
            method: self.method(),
            path: self.path(),
            body,
        }
    }

    /// The peer call carrying `self` with no body.
    pub fn peer_call(&self) -> PeerCall {
        self.with_body(Bytes::new())
    }

    /// Decodes a peer call's method and path.
    pub fn parse(method: &str, path: &str) -> Result<Call, WireError> {
        let bad = |why: &str| WireError(format!("{method} {path}: {why}"));
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        let q = unique_pairs(query).ok_or_else(|| bad("a query key is repeated"))?;
        let get = |k: &str| q.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let num = |k: &str| -> Result<u64, WireError> {
            get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(&format!("{k} must be a number")))
        };
        let id = || get("id").and_then(ObjectId::parse).ok_or_else(|| bad("id"));
        let idx = || -> Result<u8, WireError> {
            get("idx")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad("idx must be 0..=255"))
        };
        let text = |k: &str| get(k).and_then(decode_strict).ok_or_else(|| bad(k));
        Ok(match (method, route) {
            ("PUT", "/frag") => Call::PutFragment {
                id: id()?,
                idx: idx()?,
                len: num("len")?,
                off: num("off")?,
            },
            ("POST", "/commit") => Call::CommitFragment {
                id: id()?,
                idx: idx()?,
            },
            ("GET", "/frag") => Call::ReadFragment {
                id: id()?,
                idx: idx()?,
                off: num("off")?,
                len: num("len")?,
            },
            ("DELETE", "/frag") => Call::FreeFragments {
                id: id()?,
                idx: get("idx")
                    .unwrap_or("")
                    .split(',')
                    .filter(|i| !i.is_empty())
                    .map(|i| i.parse::<u8>().map_err(|_| bad("idx must list 0..=255")))
                    .collect::<Result<_, _>>()?,
            },
            ("DELETE", "/obj") => Call::FreeWrite {
                id: id()?,
                at_origin: get("at_origin") == Some("1"),
            },
            ("PUT", "/journal") => Call::KeepJournal,
            ("GET", "/journal") => Call::HasJournal { id: id()? },
            ("GET", "/journals") => Call::Journals,
            ("GET", "/freed") => Call::Freed,
            ("POST", "/flush") => Call::Flush { id: id()? },
            ("GET", "/upload") => Call::Upload { id: text("id")? },
            ("DELETE", "/upload") => Call::DropUpload { id: text("id")? },
            ("GET", "/uploads") => Call::Uploads {
                bucket: text("bucket")?,
            },
            ("GET", "/staged") => Call::Staged {
                bucket: text("bucket")?,
                key: match get("key") {
                    Some(_) => Some(text("key")?),
                    None => None,
                },
            },
            _ => return Err(bad("unknown route")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_decodes_to_itself() {
        let id = ObjectId::random();
        let calls = [
            Call::PutFragment {
                id,
                idx: 3,
                len: 10,
                off: 4,
            },
            Call::CommitFragment { id, idx: 0 },
            Call::ReadFragment {
                id,
                idx: 255,
                off: 0,
                len: 1,
            },
            Call::FreeFragments {
                id,
                idx: vec![1, 7],
            },
            Call::FreeWrite {
                id,
                at_origin: true,
            },
            Call::FreeWrite {
                id,
                at_origin: false,
            },
            Call::KeepJournal,
            Call::HasJournal { id },
            Call::Journals,
            Call::Freed,
            Call::Flush { id },
            Call::Upload {
                id: "u 1/&x".into(),
            },
            Call::DropUpload { id: "abc".into() },
            Call::Uploads {
                bucket: "warehouse".into(),
            },
            Call::Staged {
                bucket: "lake".into(),
                key: Some("t/a b&c=?.parquet".into()),
            },
            Call::Staged {
                bucket: "lake".into(),
                key: None,
            },
        ];
        for c in calls {
            assert_eq!(
                Call::parse(c.method(), &c.path()),
                Ok(c.clone()),
                "{}",
                c.path()
            );
        }
    }

    #[test]
    fn malformed_calls_are_refused_with_the_reason() {
        let id = ObjectId::random();
        for (m, p, why) in [
            (
                "PUT",
                format!("/frag?id={id}&idx=2&len=x&off=0"),
                "len must be a number",
            ),
            (
                "POST",
                format!("/commit?id={id}&idx=256"),
                "idx must be 0..=255",
            ),
            ("GET", "/journal?id=nope".to_owned(), "id"),
            ("PATCH", "/frag".to_owned(), "unknown route"),
            ("DELETE", format!("/frag?id={id}&idx=1,x"), "idx must list"),
            (
                "GET",
                format!("/frag?id={id}&idx=1&off=0&len=1&len=2"),
                "repeated",
            ),
        ] {
            let e = Call::parse(m, &p).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        }
    }
}
