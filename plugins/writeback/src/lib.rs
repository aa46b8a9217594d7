//! Write-back: a PUT on a route with `writeback:` is acknowledged once it is durable across
//! the fleet as Reed-Solomon fragments, served at once to every reader, and propagated to the
//! origin in the background. The origin stays the system of record.

pub mod catch_up;
pub mod codec;
pub mod config;
pub mod digests;
pub mod durable;
pub mod etag;
pub mod filter;
mod fleet_uploads;
pub mod flush;
pub mod fragments;
pub mod gauges;
pub mod id;
pub mod journal;
pub mod metrics;
pub mod node;
pub mod origin_layer;
mod part_copy;
pub mod plugin;
pub mod propagate;
pub mod read;
pub mod read_through;
pub mod service;
pub mod session_body;
pub mod settle;
pub mod stage;
pub use plugin::FACTORY;
pub mod list;
pub mod list_parts;
pub mod list_uploads;
pub mod multipart;
pub mod repair;
pub mod room;
pub mod sweep;
#[cfg(test)]
mod testbed;
pub mod upload;
pub mod upload_files;
pub mod uploading;
pub mod wire;
