//! The block cache's asks between nodes, mounted as the `blocks` peer service beside
//! [`crate::forget`]'s calls: this file alone encodes and decodes them.
//!
//! - `GET /head?bucket=B&key=K[&stale=E]` -> 200 with a [`HeadDoc`], 404, or 503.
//! - `GET /blocks?bucket=B&key=K&etag=E&size=N&block=S&first=F&last=L&cached=C` -> 200 with
//!   exactly the bytes `F..=L` of version `E` (the note says `hit` or `fill`), 412 when the
//!   owner cannot honour `E`, 400 for another block size, 429 when the owner is busy; with
//!   `cached=1` (a donor ask), 404 unless all of them are held.
//! - `GET /hot?bucket=B&limit=N` -> 200 with a JSON list of [`HotBlock`]s (a hand-over list).

use std::sync::Arc;

use floe_core::fleet::{Payload, PeerError, PeerRef, PeerRequest, Transport};
use floe_core::uri::{decode_strict, unique_pairs, uri_encode};
use floe_core::{ByteStream, ETag, ObjectHead};
use serde::{Deserialize, Serialize};

use crate::forget::SERVICE;

/// Largest head document read.
const MAX_HEAD_DOC: usize = 1 << 20;
/// Largest hot list read: 64 Ki entries are about 10 MiB of JSON.
const MAX_HOT_DOC: usize = 64 << 20;
/// Most entries of one hot list (a node's whole recent-block list).
pub const HOT_LIST_MAX: usize = 1 << 16;

/// One ask for bytes: `first..=last` of version `etag` (of `size` bytes) of (`bucket`, `key`),
/// cached in blocks of `block_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockAsk {
    /// Bucket.
    pub bucket: Arc<str>,
    /// Object key.
    pub key: Arc<str>,
    /// The version the bytes must belong to (the owner fills with If-Match on it).
    pub etag: ETag,
    /// The version's size.
    pub size: u64,
    /// The asker's block geometry; an owner with another one refuses.
    pub block_bytes: u64,
    /// Answer only from the owner's tiers (a donor ask): a miss there is `NotFound`, never an
    /// origin fill.
    pub cached_only: bool,
    /// First byte.
    pub first: u64,
    /// Last byte, inclusive.
    pub last: u64,
}

impl BlockAsk {
    /// Bytes asked for.
    pub fn len(&self) -> u64 {
        self.last + 1 - self.first
    }

    /// Never empty (`last` is inclusive).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// How the owner got the bytes it answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSource {
    /// All from its own tiers.
    Hit,
    /// Some or all filled from the origin for this ask (or joined a fill in flight).
    Fill,
}

impl PeerSource {
    /// The answer's note.
    pub fn note(self) -> &'static str {
        match self {
            PeerSource::Hit => "hit",
            PeerSource::Fill => "fill",
        }
    }
}

/// The owner's answer to a [`BlockAsk`].
pub struct PeerBody {
    /// The node that answered.
    pub node: Arc<str>,
    /// How it got them.
    pub source: PeerSource,
    /// Exactly [`BlockAsk::len`] bytes; a short body is an error.
    pub body: Box<dyn ByteStream>,
}

/// A block a node served recently, named for a hand-over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotBlock {
    /// Object key.
    pub key: String,
    /// Version.
    pub etag: String,
    /// The version's size.
    pub size: u64,
    /// Block geometry.
    pub block_bytes: u64,
    /// Block index.
    pub index: u64,
}

/// An owner's answer to a head ask.
#[derive(Debug, Serialize, Deserialize)]
pub struct HeadDoc {
    /// ETag, quoted as S3 sends it.
    pub etag: String,
    /// Size.
    pub size: u64,
    /// Replayed headers.
    pub headers: Vec<(String, String)>,
    /// Full-object checksums, when known.
    pub checksums: Option<Vec<(String, String)>>,
}

impl HeadDoc {
    /// The document of `head`.
    pub fn of(head: &ObjectHead) -> Self {
        Self {
            etag: head.etag.as_str().to_owned(),
            size: head.size,
            headers: head.headers.clone(),
            checksums: head.checksums.clone(),
        }
    }

    /// Back to an [`ObjectHead`]; `None` for an unusable ETag.
    pub fn into_head(self) -> Option<ObjectHead> {
        Some(ObjectHead {
            etag: ETag::parse(&self.etag).ok()?,
            size: self.size,
            headers: self.headers,
            checksums: self.checksums,
        })
    }
}

/// Why a peer call is not a well-formed call of the block cache's service (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a block-cache call: {0}")]
pub struct WireError(pub String);

/// One ask of the block cache's peer service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// The owner's version of a key; `stale` names one the asker found gone.
    Head {
        bucket: String,
        key: String,
        stale: Option<ETag>,
    },
    /// Bytes of a version.
    Blocks(BlockAsk),
    /// Up to `limit` blocks the owner served recently.
    Hot { bucket: String, limit: usize },
}

fn enc(v: &str) -> String {
    uri_encode(v, false)
}

impl Ask {
    /// The path and query below the service.
    pub fn path(&self) -> String {
        match self {
            Ask::Head { bucket, key, stale } => {
                let stale = stale
                    .as_ref()
                    .map_or(String::new(), |e| format!("&stale={}", enc(e.as_str())));
                format!("/head?bucket={}&key={}{stale}", enc(bucket), enc(key))
            }
            Ask::Blocks(a) => format!(
                "/blocks?bucket={}&key={}&etag={}&size={}&block={}&first={}&last={}&cached={}",
                enc(&a.bucket),
                enc(&a.key),
                enc(a.etag.as_str()),
                a.size,
                a.block_bytes,
                a.first,
                a.last,
                u8::from(a.cached_only)
            ),
            Ask::Hot { bucket, limit } => format!("/hot?bucket={}&limit={limit}", enc(bucket)),
        }
    }

    /// The request carrying it.
    pub fn request(&self) -> PeerRequest {
        PeerRequest {
            method: "GET",
            path: self.path(),
            body: Payload::empty(),
        }
    }

    /// Decodes a request's method and path: `None` when it is not one of these asks (another
    /// call of the service), `Err` when it is one, malformed.
    pub fn parse(method: &str, path: &str) -> Option<Result<Ask, WireError>> {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        if method != "GET" || !matches!(route, "/head" | "/blocks" | "/hot") {
            return None;
        }
        let Some(q) = unique_pairs(query) else {
            return Some(Err(WireError(format!("{path}: a query key is repeated"))));
        };
        Some(Self::fields(route, &q).ok_or_else(|| WireError(format!("malformed ask: {path}"))))
    }

    fn fields(route: &str, q: &[(&str, &str)]) -> Option<Ask> {
        let get = |k: &str| q.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let text = |k: &str| get(k).and_then(decode_strict);
        let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
        let etag = |k: &str| text(k).and_then(|e| ETag::parse(&e).ok());
        Some(match route {
            "/head" => Ask::Head {
                bucket: text("bucket")?,
                key: text("key")?,
                stale: etag("stale"),
            },
            "/hot" => Ask::Hot {
                bucket: text("bucket")?,
                limit: usize::try_from(num("limit")?).ok()?,
            },
            _ => {
                let ask = BlockAsk {
                    bucket: Arc::from(text("bucket")?),
                    key: Arc::from(text("key")?),
                    etag: etag("etag")?,
                    size: num("size")?,
                    block_bytes: num("block")?,
                    cached_only: get("cached") == Some("1"),
                    first: num("first")?,
                    last: num("last")?,
                };
                (ask.first <= ask.last && ask.last < ask.size).then_some(Ask::Blocks(ask))?
            }
        })
    }
}

/// Asks `peer` for the current version of (`bucket`, `key`); `stale` names a version the asker
/// found gone (or whose TTL ran out), which the owner revalidates rather than return.
pub async fn head(
    fleet: &dyn Transport,
    peer: &PeerRef,
    (bucket, key): (&str, &str),
    stale: Option<&ETag>,
) -> Result<ObjectHead, PeerError> {
    let ask = Ask::Head {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        stale: stale.cloned(),
    };
    // A head may wait on the owner's origin HEAD.
    let wait = fleet.peer_timeout() * 4;
    let doc = document(fleet, peer, &ask, wait, MAX_HEAD_DOC).await?;
    serde_json::from_slice::<HeadDoc>(&doc)
        .ok()
        .and_then(HeadDoc::into_head)
        .ok_or_else(|| PeerError::Unavailable("unreadable head document".into()))
}

/// Up to `limit` hot blocks of `bucket` that `peer` served recently, most recent first.
pub async fn hot(
    fleet: &dyn Transport,
    peer: &PeerRef,
    bucket: &str,
    limit: usize,
) -> Result<Vec<HotBlock>, PeerError> {
    let ask = Ask::Hot {
        bucket: bucket.to_owned(),
        limit,
    };
    let wait = fleet.peer_timeout() * 20;
    let doc = document(fleet, peer, &ask, wait, MAX_HOT_DOC).await?;
    serde_json::from_slice(&doc)
        .map_err(|e| PeerError::Unavailable(format!("unreadable hot list: {e}")))
}

/// The bytes of `ask` from `peer`; `Ok` once the owner's answer began.
pub async fn blocks(
    fleet: &dyn Transport,
    peer: &PeerRef,
    ask: BlockAsk,
) -> Result<PeerBody, PeerError> {
    let len = ask.len();
    let wait = fleet.peer_timeout();
    let answer = fleet
        .open(peer, SERVICE, Ask::Blocks(ask).request(), wait)
        .await?;
    if let Some(e) = PeerError::of_status(answer.status) {
        return Err(e);
    }
    if answer.body.len() != len {
        return Err(PeerError::Unavailable(format!(
            "{} answered {} bytes for {len}",
            peer.id,
            answer.body.len()
        )));
    }
    let source = match answer.note.as_str() {
        "hit" => PeerSource::Hit,
        _ => PeerSource::Fill,
    };
    Ok(PeerBody {
        node: answer.node,
        source,
        body: answer.body.into_stream(),
    })
}

/// The body of a 200 answer to `ask`, at most `max` bytes, all within `wait`.
async fn document(
    fleet: &dyn Transport,
    peer: &PeerRef,
    ask: &Ask,
    wait: std::time::Duration,
    max: usize,
) -> Result<bytes::Bytes, PeerError> {
    let work = async {
        let answer = fleet.open(peer, SERVICE, ask.request(), wait).await?;
        if let Some(e) = PeerError::of_status(answer.status) {
            return Err(e);
        }
        answer.body.collect(max).await
    };
    tokio::time::timeout(wait, work)
        .await
        .map_err(|_| PeerError::Unavailable(format!("{} did not answer in {wait:?}", peer.id)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ask_decodes_to_itself_and_a_malformed_one_is_refused() {
        let etag = ETag::parse("\"abc\"").unwrap();
        let asks = [
            Ask::Head {
                bucket: "wh".into(),
                key: "t/a b&c=d.parquet".into(),
                stale: Some(etag.clone()),
            },
            Ask::Head {
                bucket: "wh".into(),
                key: "k".into(),
                stale: None,
            },
            Ask::Hot {
                bucket: "wh".into(),
                limit: 10,
            },
            Ask::Blocks(BlockAsk {
                bucket: Arc::from("wh"),
                key: Arc::from("t/é.parquet"),
                etag,
                size: 10 << 20,
                block_bytes: 1 << 20,
                cached_only: true,
                first: 5,
                last: (1 << 20) - 1,
            }),
        ];
        for a in asks {
            assert_eq!(Ask::parse("GET", &a.path()), Some(Ok(a.clone())), "{a:?}");
        }
        assert_eq!(Ask::parse("POST", "/forget"), None);
        assert_eq!(Ask::parse("PUT", "/head?bucket=a&key=b"), None);
        for bad in [
            "/head?bucket=a",
            "/hot?bucket=a&limit=x",
            "/blocks?bucket=a&key=b&etag=%22e%22&size=10&block=4&first=5&last=10",
            "/blocks?bucket=a&key=b&etag=%22e%22&size=10&block=4&first=6&last=5",
            "/head?bucket=a&key=b&key=c",
        ] {
            assert!(matches!(Ask::parse("GET", bad), Some(Err(_))), "{bad}");
        }
    }
}
