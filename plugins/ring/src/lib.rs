//! Floe's fleet: nodes find each other by gossip (chitchat over an HMAC-authenticated UDP
//! transport), agree on each block's owner by weighted rendezvous hashing over stable node ids,
//! and carry each plugin's calls to its own kind on other nodes over an authenticated peer
//! API (every request head and every body frame tagged with the fleet secret). It knows no
//! plugin's messages: the block cache mounts its asks as the `blocks` service, write-back its
//! fragments as `wb`.
//!
//! Plugins see the fleet only through [`floe_core::fleet::Fleet`] (membership, placement,
//! transport); this crate's plugin shares it when the config has a `fleet:` section.
//!
//! ```
//! use floe_ring::view::{member, MemberState, Membership, View};
//! let m = Membership::new("floe-1".into());
//! m.publish(View::new(vec![
//!     member("floe-0", "10.0.0.1:9200", 100, MemberState::Active),
//!     member("floe-1", "10.0.0.2:9200", 100, MemberState::Active),
//! ]));
//! // Every node with this view names the same owner; `None` means "this node".
//! let owner = m.owner("warehouse", "t/data/a.parquet", 0);
//! assert!(owner.is_none() || &*owner.unwrap().id == "floe-0");
//! ```

mod body;
pub mod client;
pub mod config;
pub mod frames;
pub mod gossip;
pub mod handover;
pub mod hrw;
pub mod metrics;
pub mod plugin;
pub mod server;
pub mod tls;
pub mod transport;
pub mod view;
pub mod wire;

pub use plugin::{Ring, FACTORY};
