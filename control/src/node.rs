//! A client of one Floe node's admin API (see floe-proxy's admin.rs): read through the cache,
//! warm, purge, pin classes, drain accesses.

use bytes::Bytes;
use floe_core::wire;

use crate::config::Node;

/// An admin API failure.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node did not answer.
    #[error("node {0} unreachable: {1}")]
    Unreachable(String, String),
    /// The object is not at the origin.
    #[error("no such object s3://{0}")]
    NotFound(String),
    /// The node answered with an error.
    #[error("node {node} answered {status}: {body}")]
    Status {
        /// Node URL.
        node: String,
        /// HTTP status.
        status: u16,
        /// Error text.
        body: String,
    },
}

pub use floe_core::wire::{Span, StoreName as Store};

/// Bytes of an object and where they sit.
#[derive(Debug, Clone)]
pub struct Read {
    /// The bytes.
    pub bytes: Bytes,
    /// Offset of the first byte.
    pub first: u64,
    /// Object size.
    pub size: u64,
}

/// One served read reported by a node: bucket, key, ETag, offset, length.
pub type Access = (String, String, String, u64, u64);

/// A node's admin client.
#[derive(Debug, Clone)]
pub struct NodeClient {
    node: Node,
    http: reqwest::Client,
}

impl NodeClient {
    /// A client for `node`.
    pub fn new(node: Node) -> Self {
        Self {
            node,
            http: crate::http::shared(),
        }
    }

    /// The node's settings.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The node's admin URL.
    pub fn url(&self) -> &str {
        &self.node.admin
    }

    fn query(bucket: &str, key: &str, span: Span, store: Option<Store>) -> Vec<(String, String)> {
        let mut q = vec![("bucket".into(), bucket.into()), ("key".into(), key.into())];
        if let Some((name, value)) = span.query() {
            q.push((name.into(), value));
        }
        if let Some(s) = store {
            q.push(("store".into(), s.as_str().into()));
        }
        q
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, NodeError> {
        let resp = req
            .bearer_auth(&self.node.token)
            .send()
            .await
            .map_err(|e| NodeError::Unreachable(self.node.admin.clone(), crate::http::chain(&e)))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = resp.text().await.unwrap_or_default();
            return Err(NodeError::Status {
                node: self.node.admin.clone(),
                status,
                body,
            });
        }
        Ok(resp)
    }

    /// The admin URLs of the live members of the node's fleet, sorted by node id; `None` when
    /// the node is not in a fleet (404).
    pub async fn fleet(&self) -> Result<Option<Vec<String>>, NodeError> {
        #[derive(serde::Deserialize)]
        struct Member {
            node_id: String,
            #[serde(default)]
            admin_url: String,
        }
        #[derive(serde::Deserialize)]
        struct View {
            members: Vec<Member>,
        }
        let req = self.http.get(format!("{}/fleet", self.node.admin));
        match self.json::<View>(req).await {
            Ok(mut v) => {
                v.members.sort_by(|a, b| a.node_id.cmp(&b.node_id));
                let urls = v.members.into_iter().map(|m| m.admin_url);
                Ok(Some(urls.filter(|u| !u.is_empty()).collect()))
            }
            Err(NodeError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// As [`NodeClient::warm`], for the blocks' owners only (`replica=0`): in a fleet the node
    /// routes each block to its owner, which fills and keeps it.
    pub async fn warm_owners(&self, bucket: &str, key: &str, span: Span) -> Result<u64, NodeError> {
        let mut q = Self::query(bucket, key, span, None);
        q.push(("replica".into(), "0".into()));
        let req = self
            .http
            .post(format!("{}/warm", self.node.admin))
            .query(&q);
        let doc: wire::WarmDoc = self.json(req).await?;
        Ok(doc.bytes)
    }

    /// Reads `span` of s3://bucket/key through the node's cache, into `store`.
    pub async fn read(
        &self,
        bucket: &str,
        key: &str,
        span: Span,
        store: Option<Store>,
    ) -> Result<Read, NodeError> {
        let req = self
            .http
            .get(format!("{}/object", self.node.admin))
            .query(&Self::query(bucket, key, span, store));
        let resp = match self.send(req).await {
            Err(NodeError::Status { status: 404, .. }) => {
                return Err(NodeError::NotFound(format!("{bucket}/{key}")))
            }
            r => r?,
        };
        let num = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let (first, size) = (num(wire::FIRST_BYTE), num(wire::OBJECT_SIZE));
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| NodeError::Unreachable(self.node.admin.clone(), crate::http::chain(&e)))?;
        Ok(Read { bytes, first, size })
    }

    /// Warms `span` of s3://bucket/key into `store`; returns bytes warmed.
    pub async fn warm(
        &self,
        bucket: &str,
        key: &str,
        span: Span,
        store: Option<Store>,
    ) -> Result<u64, NodeError> {
        let req = self
            .http
            .post(format!("{}/warm", self.node.admin))
            .query(&Self::query(bucket, key, span, store));
        let doc: wire::WarmDoc = self.json(req).await?;
        Ok(doc.bytes)
    }

    /// Purges one key (mapping and blocks).
    pub async fn purge(&self, bucket: &str, key: &str) -> Result<(), NodeError> {
        let req = self
            .http
            .post(format!("{}/purge", self.node.admin))
            .query(&[("bucket", bucket), ("key", key)]);
        self.send(req).await.map(|_| ())
    }

    /// Drops the catalog route's cached answers about `namespace` (dotted). A node without a
    /// catalog route answers 404, which is fine. A call that fails is sent once more: a pooled
    /// connection the node closed fails at once and the second call opens a new one, and a
    /// purge lost leaves the route answering the old snapshot until the table's next commit.
    pub async fn purge_catalog(&self, namespace: &str) -> Result<(), NodeError> {
        match self.purge_catalog_once(namespace).await {
            Ok(()) => Ok(()),
            Err(_) => self.purge_catalog_once(namespace).await,
        }
    }

    async fn purge_catalog_once(&self, namespace: &str) -> Result<(), NodeError> {
        let req = self
            .http
            .post(format!("{}/catalog/purge", self.node.admin))
            .query(&[("namespace", namespace)]);
        match self.send(req).await {
            Ok(_) | Err(NodeError::Status { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Pins `keys` of `bucket` as immutable table files of `store`.
    pub async fn classify(
        &self,
        bucket: &str,
        keys: &[String],
        store: Store,
    ) -> Result<(), NodeError> {
        let req = self
            .http
            .post(format!("{}/classify", self.node.admin))
            .query(&[("bucket", bucket), ("store", store.as_str())])
            .body(keys.join("\n"));
        self.send(req).await.map(|_| ())
    }

    /// Publishes one table's column chunks in `bucket` (see floe-proxy's `POST /chunks`).
    pub async fn chunks(&self, bucket: &str, body: &wire::ChunksBody) -> Result<(), NodeError> {
        let req = self
            .http
            .post(format!("{}/chunks", self.node.admin))
            .query(&[("bucket", bucket)])
            .json(body);
        self.send(req).await.map(|_| ())
    }

    /// Replaces `bucket`'s pinned files on the node (see floe-proxy's `PUT /kept`); a set past
    /// the node's bound is refused whole (409, the bound named).
    pub async fn kept(
        &self,
        bucket: &str,
        body: &wire::KeptBody,
    ) -> Result<wire::KeptDoc, NodeError> {
        let req = self
            .http
            .put(format!("{}/kept", self.node.admin))
            .query(&[("bucket", bucket)])
            .json(body);
        self.json(req).await
    }

    /// Bytes the node holds of each of `keys` in `bucket` (`POST /held`), in order.
    pub async fn held(&self, bucket: &str, keys: &[String]) -> Result<Vec<u64>, NodeError> {
        let req = self
            .http
            .post(format!("{}/held", self.node.admin))
            .query(&[("bucket", bucket)])
            .json(&wire::HeldBody {
                keys: keys.to_vec(),
            });
        let doc: wire::HeldDoc = self.json(req).await?;
        Ok(doc.bytes)
    }

    /// What the node keeps of `bucket`'s pinned files (`GET /kept`).
    pub async fn kept_doc(&self, bucket: &str) -> Result<wire::KeptDoc, NodeError> {
        let req = self
            .http
            .get(format!("{}/kept", self.node.admin))
            .query(&[("bucket", bucket)]);
        self.json(req).await
    }

    /// The node's block-cache statistics (`GET /stats`).
    pub async fn stats(&self) -> Result<wire::StatsDoc, NodeError> {
        let req = self.http.get(format!("{}/stats", self.node.admin));
        self.json(req).await
    }

    /// Any other admin document as JSON (`/writeback`, `/fleet`); `None` when the node has no
    /// such part (404: no write-back route, not in a fleet).
    pub async fn doc(&self, path: &str) -> Result<Option<serde_json::Value>, NodeError> {
        let req = self.http.get(format!("{}{path}", self.node.admin));
        match self.json(req).await {
            Ok(v) => Ok(Some(v)),
            Err(NodeError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Client reads on the node waiting on origin fills right now.
    pub async fn foreground_misses(&self) -> Result<u64, NodeError> {
        let req = self.http.get(format!("{}/stats", self.node.admin));
        let doc: wire::StatsDoc = self.json(req).await?;
        Ok(doc.foreground_misses)
    }

    /// Drains up to `max` access records; returns them and the node's dropped count.
    pub async fn accesses(&self, max: usize) -> Result<(Vec<Access>, u64), NodeError> {
        let req = self
            .http
            .get(format!("{}/accesses", self.node.admin))
            .query(&[("max", max)]);
        let a: wire::AccessesDoc = self.json(req).await?;
        let rows = a
            .accesses
            .into_iter()
            .map(|wire::AccessRecord(b, k, e, o, l)| (b, k, e, o, l))
            .collect();
        Ok((rows, a.dropped))
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, NodeError> {
        let resp = self.send(req).await?;
        resp.json()
            .await
            .map_err(|e| NodeError::Unreachable(self.node.admin.clone(), crate::http::chain(&e)))
    }
}

/// Splits `s3://bucket/key` (also s3a/s3n) into bucket and key.
pub fn split_location(loc: &str) -> Option<(&str, &str)> {
    let rest = loc
        .strip_prefix("s3://")
        .or_else(|| loc.strip_prefix("s3a://"))
        .or_else(|| loc.strip_prefix("s3n://"))?;
    let (b, k) = rest.split_once('/')?;
    (!b.is_empty() && !k.is_empty()).then_some((b, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split() {
        assert_eq!(split_location("s3://b/k/x.avro"), Some(("b", "k/x.avro")));
        assert_eq!(split_location("s3a://b/k"), Some(("b", "k")));
        assert_eq!(split_location("file:///tmp/x"), None);
        assert_eq!(split_location("s3://b/"), None);
    }
}
