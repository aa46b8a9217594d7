//! ListBuckets that tells the truth: of the buckets a caller's key may use, those that exist at
//! their origin, with the origin's creation dates. Each origin is asked with its own
//! credentials (a signed `GET /`), and its answer is kept for [`TTL`], so a client listing
//! buckets in a loop costs the origin one request per origin every few seconds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_filter::UpstreamPayload;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::origin::{Origin, QUEUE_WAIT};

/// How long an origin's bucket list is kept.
pub const TTL: Duration = Duration::from_secs(5);
/// Largest ListBuckets answer read from an origin.
const MAX_BODY: usize = 16 << 20;

/// An origin's buckets: (name, creation date as the origin wrote it).
pub type BucketList = Arc<Vec<(String, String)>>;

/// Origins' bucket lists, asked on demand and kept briefly.
pub struct OriginBuckets {
    connector: Connector,
    kept: Mutex<Kept>,
}

/// The lists kept, and how many times any was dropped: a list asked before a drop is not
/// kept after it (it may name a bucket just removed).
#[derive(Default)]
struct Kept {
    lists: HashMap<String, (Instant, BucketList)>,
    drops: u64,
}

impl Default for OriginBuckets {
    fn default() -> Self {
        Self {
            connector: Connector::new(None),
            kept: Mutex::default(),
        }
    }
}

impl OriginBuckets {
    /// Drops what is kept for the origin named `name` (a bucket was made or removed).
    pub fn forget(&self, name: &str) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.lists.remove(name);
            kept.drops += 1;
        }
    }

    /// The buckets `origin` has (kept for [`TTL`]).
    pub async fn of(&self, origin: &Origin) -> Result<BucketList, String> {
        let mut drops = 0;
        if let Ok(kept) = self.kept.lock() {
            if let Some((at, list)) = kept.lists.get(&origin.name) {
                if at.elapsed() < TTL {
                    return Ok(list.clone());
                }
            }
            drops = kept.drops;
        }
        let list = Arc::new(self.ask(origin).await?);
        if let Ok(mut kept) = self.kept.lock() {
            if kept.drops == drops {
                let entry = (Instant::now(), list.clone());
                kept.lists.insert(origin.name.clone(), entry);
            }
        }
        Ok(list)
    }

    async fn ask(&self, origin: &Origin) -> Result<Vec<(String, String)>, String> {
        let _permit = origin
            .acquire(QUEUE_WAIT)
            .await
            .ok_or("origin queue full")?;
        let mut req = RequestHeader::build("GET", b"/", None).map_err(|e| e.to_string())?;
        origin
            .prepare(&mut req, "", "", "", &UpstreamPayload::Unsigned)
            .map_err(|e| e.to_string())?;
        let peer = origin.peer("");
        let (mut s, _) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(peer.options.read_timeout);
        s.set_write_timeout(peer.options.write_timeout);
        s.write_request_header(Box::new(req))
            .await
            .map_err(|e| e.to_string())?;
        s.finish_request_body().await.map_err(|e| e.to_string())?;
        s.read_response_header().await.map_err(|e| e.to_string())?;
        let status = s.response_header().map_or(0, |h| h.status.as_u16());
        let mut body = Vec::new();
        while let Some(b) = s.read_response_body().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&b);
            if body.len() > MAX_BODY {
                return Err("ListBuckets answer too large".into());
            }
        }
        if status != 200 {
            return Err(format!("origin answered ListBuckets with {status}"));
        }
        self.connector
            .release_http_session(s, &peer, Some(Duration::from_secs(60)))
            .await;
        Ok(parse(&body))
    }
}

/// The (Name, CreationDate) pairs of a ListAllMyBucketsResult.
pub fn parse(xml: &[u8]) -> Vec<(String, String)> {
    let mut r = Reader::from_reader(xml);
    let mut out = Vec::new();
    let (mut field, mut name, mut date) = (String::new(), String::new(), String::new());
    let mut buf = Vec::new();
    loop {
        match r.read_event_into(&mut buf) {
            Ok(Event::Start(e)) => field = String::from_utf8_lossy(e.local_name().as_ref()).into(),
            Ok(Event::Text(t)) => {
                let text = t.decode().map(|c| c.into_owned()).unwrap_or_default();
                match field.as_str() {
                    "Name" => name = text,
                    "CreationDate" => date = text,
                    _ => {}
                }
            }
            Ok(Event::End(e)) => {
                if e.local_name().as_ref() == b"Bucket" && !name.is_empty() {
                    out.push((std::mem::take(&mut name), std::mem::take(&mut date)));
                }
                field.clear();
            }
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
        buf.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_dates_come_from_the_origin_answer() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>x</ID></Owner>
<Buckets><Bucket><Name>a</Name><CreationDate>2025-01-02T03:04:05.000Z</CreationDate></Bucket>
<Bucket><CreationDate>2025-02-02T00:00:00.000Z</CreationDate><Name>b.c</Name></Bucket></Buckets>
</ListAllMyBucketsResult>"#;
        assert_eq!(
            parse(xml),
            [
                ("a".to_owned(), "2025-01-02T03:04:05.000Z".to_owned()),
                ("b.c".to_owned(), "2025-02-02T00:00:00.000Z".to_owned())
            ]
        );
        assert!(parse(b"not xml").is_empty());
    }
}
