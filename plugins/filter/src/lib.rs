//! The data plane's seams on Pingora: [`RequestFilter`], the trait every filter crate
//! implements (its hooks mirror Pingora's `ProxyHttp`), and [`plugin`], how a plugin crate is
//! configured, started and mounted. Split from `floe-core` so that the control plane, which
//! links only names and wire types, does not build Pingora.

mod filter;
pub mod plugin;

pub use filter::{BodyStage, CacheOutcome, FilterCtx, RequestFilter, UpstreamPayload};
