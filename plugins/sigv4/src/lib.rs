//! SigV4 verification for Floe: the Authorization header and presigned URLs, clock skew, and
//! every payload mode S3 clients send (unsigned, hex SHA-256, signed aws-chunked, unsigned
//! aws-chunked with checksum trailers).
//!
//! ```
//! use floe_sigv4::{RequestParts, Verifier};
//! let v = Verifier::new("us-east-1", [("AKID".to_owned(), "secret".to_owned())]);
//! let headers = http::HeaderMap::new();
//! let req = RequestParts { method: "GET", raw_path: "/b/k", raw_query: "", headers: &headers };
//! // No credentials at all: the caller decides whether anonymous access is allowed.
//! assert!(v.verify(&req, 0).unwrap().is_none());
//! ```

pub mod auth;
pub mod canonical;
pub mod chunked;
mod filter;
pub mod plugin;
mod post;
pub mod post_form;
pub mod post_policy;
mod verify;

pub use filter::{SigV4Filter, PREREAD_LIMIT};
pub use floe_core::checksum::Checksum;
pub use plugin::FACTORY;
pub use post::PostUpload;
pub use verify::{RequestParts, Verified, Verifier, MAX_SKEW_SECONDS};
