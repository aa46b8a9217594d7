//! Floe's fleet: nodes find each other by gossip (chitchat over an HMAC-authenticated UDP
//! transport), agree on each block's owner by weighted rendezvous hashing over stable node ids,
//! and ask owners for blocks over an authenticated peer API, so a block the fleet holds is
//! fetched from the origin once, whichever node a client reached.
//!
//! The block cache sees the fleet only through [`floe_core::fleet::Fleet`]; this crate's
//! plugin shares it when the config has a `fleet:` section.
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

pub mod client;
pub mod config;
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
