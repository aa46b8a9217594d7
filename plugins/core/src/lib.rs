//! Shared names and wire types of Floe, with no Pingora and no plugin in them: validated names,
//! S3 errors, the S3 operation a request is, ranges, traces, the origin and fleet seams, and the
//! control <-> proxy wire contract. The control plane links this alone; the data plane's filter
//! trait and plugin seam (Pingora types) are in `floe-filter`.
//!
//! ```
//! use floe_core::{BucketName, S3Error, S3ErrorCode};
//! let bucket = BucketName::parse("warehouse").unwrap();
//! assert_eq!(bucket.as_str(), "warehouse");
//! let err = S3Error::new(S3ErrorCode::AccessDenied, "no");
//! assert_eq!(err.status(), 403);
//! assert!(err.to_xml("/warehouse", "0123").contains("<Code>AccessDenied</Code>"));
//! ```

pub mod away;
pub mod checksum;
pub mod conditions;
pub mod config;
pub mod copy_source;
mod error;
pub mod fleet;
mod op;
mod origin;
pub mod otlp;
pub mod range;
pub mod recent;
pub mod spans;
pub mod subresource;
pub mod trace;
mod types;
pub mod uri;
pub mod versions;
pub mod wire;
pub mod worker;

pub use error::{chain, xml_escape, xml_unescape, Cause, S3Error, S3ErrorCode};
pub use op::{plain_read, response_overrides, version_read, S3Op};
pub use origin::{ByteStream, Fetched, ObjectHead, OriginError, OriginReader, PartSpan};
pub use types::{BucketName, ETag, NameError, ObjectKey, RequestId};
