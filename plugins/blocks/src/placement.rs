//! Placement seams: which blocks one origin GET may fetch together. One node fetches any run of
//! adjacent missing blocks with one ranged GET; a fleet splits runs where the blocks' owners
//! differ, so each owner fills (and keeps) only its own blocks.

use crate::target::Target;

/// Whether two adjacent blocks of one object version may be fetched by the same origin GET.
///
/// Contract: called while a reader builds a run, with `next == prev + 1`; must be cheap and
/// must not block (it runs on the async thread, on the miss path only). Answering `false`
/// ends the run before `next`: it costs a round trip, never correctness.
pub trait RunSplit: Send + Sync {
    /// May `prev` and `next` share one GET?
    fn together(&self, target: &Target, prev: u64, next: u64) -> bool;
}

/// A single node: every run is fetched together (today's only placement).
pub struct OneNode;

impl RunSplit for OneNode {
    fn together(&self, _target: &Target, _prev: u64, _next: u64) -> bool {
        true
    }
}
