//! Write-back: a PUT on a route with `writeback:` is acknowledged once it is durable across
//! the fleet as Reed-Solomon fragments, served at once to every reader, and propagated to the
//! origin in the background. The origin stays the system of record.
//!
//! Outside this crate: the plugin ([`FACTORY`]), its config sections (for the proxy's schema),
//! and what the fuzz targets drive (the fragment store's side of the peer API, its calls, the
//! journal, CompleteMultipartUpload's body).

mod catch_up;
mod codec;
pub mod config;
mod digests;
mod durable;
mod etag;
mod filter;
mod fleet_uploads;
mod flush;
pub mod fragments;
mod gauges;
mod id;
mod index;
pub mod journal;
mod list;
mod list_parts;
mod list_uploads;
mod metrics;
pub mod multipart;
mod node;
mod origin_layer;
mod part_copy;
mod plugin;
mod propagate;
mod read;
mod read_through;
mod readiness;
mod repair;
mod room;
pub mod service;
mod session_body;
mod settle;
mod stage;
mod staged_elsewhere;
mod sweep;
#[cfg(test)]
mod testbed;
mod upload;
mod upload_files;
mod uploading;
pub mod wire;

pub use plugin::FACTORY;
