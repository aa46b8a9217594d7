//! The block cache's own admin answers: documents of endpoints only it serves and nobody but
//! operators and tests read (`POST /purge`, `/classify`, `/chunks`, `/settle`). The answers the
//! control plane parses (stats, warm, chunk bodies, accesses) are in [`floe_core::wire`].

use serde::{Deserialize, Serialize};

/// `POST /purge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeDoc {
    /// Keys purged.
    pub keys: u64,
    /// Blocks removed.
    pub blocks: u64,
}

/// `POST /classify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassifyDoc {
    /// Keys in the request.
    pub keys: u64,
    /// Keys pinned now on the route.
    pub pinned: u64,
}

/// `POST /chunks` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunksDoc {
    /// Files whose chunks are held now.
    pub files: u64,
    /// Files refused (the node's bound on chunks held).
    pub refused: u64,
    /// Chunk ranges the node holds in all.
    pub chunks: u64,
}

/// `POST /settle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleDoc {
    /// Bytes both stores have written to disk, all pending writes included.
    pub disk_write_bytes: u64,
}
