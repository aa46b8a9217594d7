//! Floe's block cache: GetObject/HeadObject served from blocks keyed (bucket, key, ETag,
//! block size, index) in two foyer stores (data; metadata), filled by ranged GETs with
//! If-Match so a response never mixes versions, with single-flight fills and scan-resistant
//! admission.
//!
//! ```
//! use floe_blocks::range::{resolve, RangeAsk};
//! assert_eq!(resolve(Some("bytes=-4"), 10), RangeAsk::Part { first: 6, last: 9 });
//! ```

pub mod access;
mod admin;
pub mod admin_docs;
mod adopt;
mod answer;
pub mod asks;
pub mod block;
mod cache;
pub mod classify;
pub mod config;
pub mod delete;
mod fill;
mod filter;
pub mod forget;
mod gauges;
mod held;
pub mod hints;
pub mod hot;
mod inflight;
mod kept;
mod mapping;
pub mod missed;
pub mod neighbours;
mod ops;
mod page_writer;
mod pages;
mod peer;
mod piece;
pub mod placement;
mod plan;
pub mod plugin;
pub mod pool;
pub mod range;
mod reader;
mod resolve;
mod serve;
mod service;
pub mod shares;
mod sketch;
mod sources;
mod start;
mod store;
mod tap;
mod target;
#[cfg(test)]
mod testbed;
pub mod tombs;
mod trail;
mod version;

pub use access::{Access, AccessLog};
pub use admin::MAX_ADMIN_BODY;
pub use cache::{BlockCache, CacheSettings, Fill, StoreStats};
pub use classify::{Class, Store};
pub use filter::BlockFilter;
pub use ops::{OpError, ReadOut, ReadSpan};
pub use placement::{OneNode, RunSplit};
pub use plugin::FACTORY;
pub use store::{BlockStore, StoreSettings, REGION_BYTES};
pub use tap::{ServeError, Sink};
pub use target::Target;
