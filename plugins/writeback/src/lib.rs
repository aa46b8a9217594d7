//! Write-back: a PUT on a route with `writeback:` is acknowledged once it is durable across
//! the fleet as Reed-Solomon fragments, served at once to every reader, and propagated to the
//! origin in the background. The origin stays the system of record.

pub mod codec;
pub mod config;
pub mod durable;
pub mod fragments;
pub mod id;
pub mod journal;
