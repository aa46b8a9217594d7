//! Reading a staged write back: stripe by stripe, from its data fragments when they are all
//! there and intact (no decoding), else from any k intact shards. A shard failing its CRC is an
//! erasure; fewer than k intact shards is an error, never wrong bytes.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::{ByteStream, OriginError};
use tokio::task::JoinSet;

use crate::codec;
use crate::journal::Record;
use crate::node::Node;
use crate::wire::Call;

impl Node {
    /// One shard (with its CRC) of stripe `j` of `r`, from fragment `index`; `None` when its
    /// node does not answer it.
    async fn shard(self: &Arc<Self>, r: &Record, index: u8, j: u64) -> Option<Bytes> {
        let p = r.placements.iter().find(|p| p.index == index)?;
        let g = &r.geometry;
        let call = Call::ReadFragment {
            id: r.id,
            idx: index,
            off: g.shard_offset(j),
            len: g.shard_len(j) + 4,
        }
        .peer_call();
        match self.call(&self.peer_of(p), call).await {
            Ok(reply) if reply.status == 200 => Some(reply.body),
            _ => None,
        }
    }

    async fn fetch(
        self: &Arc<Self>,
        r: &Arc<Record>,
        j: u64,
        idx: std::ops::Range<u8>,
        into: &mut [Option<Bytes>],
    ) {
        let mut set = JoinSet::new();
        for i in idx {
            let (me, r) = (self.clone(), r.clone());
            set.spawn(async move { (i, me.shard(&r, i, j).await) });
        }
        while let Some(Ok((i, s))) = set.join_next().await {
            if let Some(slot) = into.get_mut(usize::from(i)) {
                *slot = s;
            }
        }
    }

    /// The bytes of stripe `j` of `r`.
    pub async fn stripe(self: &Arc<Self>, r: &Arc<Record>, j: u64) -> Result<Bytes, OriginError> {
        let g = r.geometry;
        let mut shards: Vec<Option<Bytes>> = vec![None; g.width()];
        self.fetch(r, j, 0..g.k, &mut shards).await;
        let intact = shards.iter().take(usize::from(g.k)).all(|s| {
            s.as_deref()
                .is_some_and(|s| codec::verified(&g, j, s).is_some())
        });
        if !intact {
            self.fetch(r, j, g.k..g.k + g.m, &mut shards).await;
        }
        let (bytes, corrupt) = tokio::task::spawn_blocking(move || codec::decode(&g, j, &shards))
            .await
            .map_err(|e| OriginError::Transport(e.to_string()))?
            .map_err(|e| OriginError::Transport(format!("staged write {}: {e}", r.id)))?;
        if corrupt > 0 {
            crate::metrics::corrupt(corrupt as u64);
            tracing::warn!(id = %r.id, stripe = j, corrupt, "corrupt fragment shards read as erasures");
        }
        Ok(bytes)
    }

    /// Bytes `first..=last` of `r`, stripe by stripe.
    pub fn range(self: &Arc<Self>, r: Arc<Record>, first: u64, last: u64) -> RecordStream {
        let s = u64::from(r.geometry.stripe_bytes);
        RecordStream {
            node: self.clone(),
            record: r,
            next: first / s,
            skip: (first % s) as usize,
            remaining: (last + 1).saturating_sub(first),
        }
    }
}

/// A staged write's bytes as a stream.
pub struct RecordStream {
    node: Arc<Node>,
    record: Arc<Record>,
    next: u64,
    skip: usize,
    remaining: u64,
}

#[async_trait]
impl ByteStream for RecordStream {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let mut b = self.node.stripe(&self.record, self.next).await?;
        self.next += 1;
        let b = b.split_off(self.skip.min(b.len()));
        self.skip = 0;
        let take = (b.len() as u64).min(self.remaining) as usize;
        self.remaining -= take as u64;
        Ok(Some(b.slice(..take)))
    }
}
