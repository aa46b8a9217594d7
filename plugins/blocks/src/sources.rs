//! Where a reader's misses go in a fleet: the block's owner (a run never spans two owners), or,
//! for a block this node owns, the donors that may still hold it; and the first fetch started
//! before a response's header, so the header can say where the bytes came from.

use std::sync::Arc;

use floe_core::fleet::{Fleet, PeerRef};

use crate::fill::Served;
use crate::inflight::FillError;
use crate::reader::{BlockReader, Plan};

impl BlockReader {
    /// Misses go to their owners in `fleet` first.
    pub fn with_fleet(mut self, fleet: Option<Arc<dyn Fleet>>) -> Self {
        self.forward = fleet.is_some();
        self.fleet = fleet;
        self
    }

    /// This reader answers a peer: it never forwards a miss to an owner (asks never travel
    /// further), though it asks a donor that may hold the block.
    pub fn answering_peer(mut self) -> Self {
        self.forward = false;
        self
    }

    /// The owner of block `index` when it is a peer. A rewritable object has one owner for all
    /// its blocks (that of block 0), so a read of it is one origin GET of one version rather
    /// than several GETs that a rewrite between them would fail.
    pub(crate) fn owner(&self, index: u64) -> Option<(Arc<dyn Fleet>, PeerRef)> {
        let f = self.fleet.as_ref().filter(|_| self.forward)?;
        let index = self.placed(index);
        let peer = f.owner(&self.target.bucket_key, &self.target.object_key, index)?;
        Some((f.clone(), peer))
    }

    /// The block whose owner places block `index` (itself, or block 0 of a rewritable object).
    pub(crate) fn placed(&self, index: u64) -> u64 {
        if self.target.map.class.immutable {
            index
        } else {
            0
        }
    }

    /// Peers that may hold block `index`, which this node owns (see [`Fleet::donors`]).
    pub(crate) fn donors(&self, index: u64) -> Vec<PeerRef> {
        let Some(f) = self.fleet.as_ref() else {
            return Vec::new();
        };
        f.donors(
            &self.target.bucket_key,
            &self.target.object_key,
            self.placed(index),
        )
    }

    /// Who a fetch of block `index` asks first: its owner (`false`) or its first donor
    /// (`true`); `None` for the origin. An owner's blocks and a donor's never share an ask: a
    /// donor answers only what it holds, and the owner must fill (and keep) its own.
    pub(crate) fn source_of(&self, index: u64) -> Option<(Arc<str>, bool)> {
        match self.owner(index) {
            Some((_, p)) => Some((p.id.clone(), false)),
            None => self.donors(index).first().map(|p| (p.id.clone(), true)),
        }
    }

    /// Whether block `next` may join a run that began at a block asking `first` (see
    /// [`BlockReader::source_of`]) and ends at `next - 1`: same placement, same source.
    pub(crate) fn joins_run(&self, first: &Option<(Arc<str>, bool)>, next: u64) -> bool {
        self.cache.run_split.together(&self.target, next - 1, next)
            && (self.fleet.is_none() || self.source_of(next) == *first)
    }

    /// With a fleet: starts the response's first fetch before its header is sent, so the
    /// header can say where the bytes come from (`hit-peer`, `fill-peer`) and a version the
    /// owner cannot honour is known before the response has begun. `None` when this reader's
    /// bytes come from the origin or other reads' fills.
    pub(crate) async fn prime(&mut self, plan: &Plan) -> Option<Result<Served, FillError>> {
        let index = plan.first_missing?;
        self.fleet.as_ref()?;
        let got = self.block(index).await;
        let failed = got.as_ref().err().cloned();
        self.primed = Some((index, got));
        if let Some(e) = failed {
            return Some(Err(e));
        }
        self.served.take()?.await.ok().map(Ok)
    }
}
