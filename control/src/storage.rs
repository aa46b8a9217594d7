//! An iceberg [`Storage`] that reads `s3://` objects through a Floe node's admin API, so every
//! manifest list and manifest the control plane parses lands in the proxy's metadata store on the
//! way. It is read-only: floe-control never writes table state, and writes fail loudly.
//!
//! No iceberg storage crate fits: iceberg-storage-opendal would read the origin directly and
//! leave the cache cold, which is the opposite of what the warmer is for.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

use crate::config::Node;
use crate::node::{split_location, NodeClient, NodeError, Span, Store};

/// Builds [`FloeStorage`] for a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FloeStorageFactory {
    admin: String,
    token: String,
}

impl FloeStorageFactory {
    /// A factory reading through `node`.
    pub fn new(node: &Node) -> Self {
        Self {
            admin: node.admin.clone(),
            token: node.token.clone(),
        }
    }
}

#[typetag::serde]
impl StorageFactory for FloeStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(FloeStorage {
            admin: self.admin.clone(),
            token: self.token.clone(),
            client: None,
        }))
    }
}

/// Read-only storage through a Floe node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FloeStorage {
    admin: String,
    token: String,
    #[serde(skip)]
    client: Option<NodeClient>,
}

impl FloeStorage {
    fn client(&self) -> NodeClient {
        self.client.clone().unwrap_or_else(|| {
            NodeClient::new(Node {
                admin: self.admin.clone(),
                token: self.token.clone(),
            })
        })
    }
}

fn locate(path: &str) -> Result<(String, String)> {
    split_location(path)
        .map(|(b, k)| (b.to_owned(), k.to_owned()))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("not an s3:// location: {path}"),
            )
        })
}

fn io_err(e: NodeError) -> Error {
    let kind = match e {
        NodeError::NotFound(_) => ErrorKind::DataInvalid,
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, e.to_string())
}

fn read_only(path: &str) -> Error {
    Error::new(
        ErrorKind::FeatureUnsupported,
        format!("floe-control never writes table state (asked to write {path})"),
    )
}

async fn read_span(c: &NodeClient, path: &str, span: Span) -> Result<crate::node::Read> {
    let (b, k) = locate(path)?;
    c.read(&b, &k, span, Some(Store::Metadata))
        .await
        .map_err(io_err)
}

struct FloeRead {
    client: NodeClient,
    path: String,
}

#[async_trait]
impl FileRead for FloeRead {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let r = read_span(
            &self.client,
            &self.path,
            Span::Range(range.start, range.end - 1),
        )
        .await?;
        Ok(r.bytes)
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for FloeStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match read_span(&self.client(), path, Span::Range(0, 0)).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::DataInvalid => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let r = read_span(&self.client(), path, Span::Range(0, 0)).await?;
        Ok(FileMetadata { size: r.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        Ok(read_span(&self.client(), path, Span::Whole).await?.bytes)
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(FloeRead {
            client: self.client(),
            path: path.to_owned(),
        }))
    }

    async fn write(&self, path: &str, _bs: Bytes) -> Result<()> {
        Err(read_only(path))
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Err(read_only(path))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        Err(read_only(path))
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        Err(read_only(path))
    }

    async fn delete_stream(&self, _paths: BoxStream<'static, String>) -> Result<()> {
        Err(read_only("a stream of paths"))
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_owned()))
    }
}
