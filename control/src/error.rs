//! floe-control's errors: what a worker records as its last error and the status shows.

use crate::node::NodeError;

/// Why a warm, footer read, heat pull or catalog call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A node's admin API failed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The catalog or the iceberg crate failed (`what` says on which object).
    #[error("{what}: {source}")]
    Iceberg {
        /// The object or call.
        what: String,
        /// The cause (boxed: iceberg's error is large).
        #[source]
        source: Box<iceberg::Error>,
    },
    /// A table names a file that is not an s3:// location.
    #[error("{0} is not an s3:// location")]
    Location(String),
    /// A Parquet footer could not be read.
    #[error("parquet footer of {key}: {reason}")]
    Footer {
        /// The data file.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// No node is configured to read through.
    #[error("no Floe node to read through")]
    NoNodes,
    /// Several nodes failed (heat pulls go on past each).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Nodes(Vec<NodeError>),
}

impl ControlError {
    /// An iceberg error about `what`.
    pub fn iceberg(what: impl Into<String>) -> impl FnOnce(iceberg::Error) -> Self {
        let what = what.into();
        move |source| ControlError::Iceberg {
            what,
            source: Box::new(source),
        }
    }
}
