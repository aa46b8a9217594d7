//! The resolving GET's body: a cold GET resolves the version with its own answer, and that
//! answer's body fills the blocks it covers while it is tapped for the response that sent it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use floe_core::{ByteStream, OriginReader};
use tokio::sync::{mpsc, watch};

use crate::cache::BlockCache;
use crate::classify::Store;
use crate::fill::{fill, RunItem, Source};
use crate::inflight::{Claim, Slot};
use crate::range::block_span;
use crate::tap::Tap;
use crate::target::Target;

/// A block claimed ahead: by this reader's run (`own`: the in-block bytes fetched) or by
/// another read's fill met while claiming.
pub(crate) struct Pending {
    pub(crate) index: u64,
    pub(crate) rx: watch::Receiver<Slot>,
    pub(crate) own: Option<(u32, u32)>,
}

/// The fill of a resolving GET's body, for the reader of the response that made it.
pub struct Adopted {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) pending: Vec<Pending>,
    pub(crate) tap: Option<Tap>,
    /// The origin bytes the fill got (the response that made the GET counts them).
    pub(crate) tally: Arc<AtomicU64>,
}

/// Claims the blocks of object bytes `first..=last` and fills them from `body` (the answer to
/// the GET that resolved the version), tapping it for the response. A block that is cached or
/// claimed already ends the run: the reader gets the rest the usual way.
pub(crate) fn adopt(
    cache: &Arc<BlockCache>,
    origin: &Arc<dyn OriginReader>,
    target: Target,
    (first, last): (u64, u64),
    body: Box<dyn ByteStream>,
) -> Adopted {
    let (bs, size, class) = (
        cache.settings.block_bytes,
        target.map.size,
        target.map.class,
    );
    let mut run = Vec::new();
    for index in first / bs..=last / bs {
        let (start, len) = block_span(index, bs, size);
        let key = target.block_key(index, bs);
        let store = cache.store_of(class, (&target.bucket_key, &target.object_key), index, size);
        if cache.contains(&key, store) {
            break;
        }
        let Claim::Mine(tx) = cache.inflight.claim(&key) else {
            break;
        };
        if store == Store::Data {
            cache.sketch.touch(key.stable_hash());
        }
        let from = (first.max(start) - start) as u32;
        let to = ((last + 1).min(start + len) - start) as u32;
        run.push(RunItem {
            index,
            key,
            tx,
            from,
            to,
            held: None,
        });
    }
    let pending = run
        .iter()
        .map(|it| Pending {
            index: it.index,
            rx: it.tx.subscribe(),
            own: Some((it.from, it.to)),
        })
        .collect();
    let (ttx, trx) = mpsc::unbounded_channel();
    let end = run
        .last()
        .map_or(first, |it| it.index * bs + u64::from(it.to));
    let tap = run
        .first()
        .map(|it| Tap::new(trx, first, end, it.tx.subscribe()));
    let tally = Arc::new(AtomicU64::new(0));
    if !run.is_empty() {
        tokio::spawn(fill(
            cache.clone(),
            Source::origin(origin, tally.clone()),
            target,
            run,
            Some(body),
            Some(ttx),
        ));
    }
    Adopted {
        first,
        last,
        pending,
        tap,
        tally,
    }
}
