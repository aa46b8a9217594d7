//! The block cache: two stores, admission, and the key -> ETag mapping records.

use crate::pool::{populate, BufferPool, PopulateState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::access::AccessLog;
use crate::block::Block;
use crate::classify::{Class, Classifier, Rule, Store};
use crate::inflight::Inflight;
use crate::mapping::Mapping;
use crate::placement::{OneNode, RunSplit};
use crate::range::block_span;
use crate::sketch::Sketch;
use crate::store::{self, BlockKey, BlockStore, StoreEvents, StoreSettings};

/// Runtime settings of the block cache.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// Block geometry, 1-8 MiB.
    pub block_bytes: u64,
    /// Parquet footer suffix that goes to the metadata store.
    pub footer_bytes: u64,
    /// Data store (what the routes without a share use).
    pub data: StoreSettings,
    /// Routes' data stores (per-route quotas), carved out of the data store's ceilings.
    pub shares: Vec<crate::shares::ShareSettings>,
    /// Metadata store.
    pub meta: StoreSettings,
    /// DRAM of the kept store (pinned tables' files; 0: pins refused).
    pub kept_bytes: usize,
    /// Touches a data block needs before admission once the data store is under pressure.
    pub admission_threshold: u8,
    /// TTL of mutable (rewritable) objects' mappings.
    pub mutable_ttl: Duration,
    /// Classification rules, first match wins.
    pub rules: Vec<Rule>,
    /// Most blocks fetched by one ranged GET.
    pub max_run_blocks: u64,
    /// What a client read's miss of a data block fetches.
    pub fill: Fill,
    /// Whether the pool is populated up to the DRAM ceilings at start (`populate`).
    pub populate_dram: bool,
}

/// What a client read's miss of a data block fetches from the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Only the bytes the read needs (kept as a span of the block), plus the rest of the
    /// block when the read starts where a cached span ends (a sequential reader). A cold
    /// random read costs the origin what it would cost without Floe.
    Range,
    /// The whole block: later reads of its other bytes hit, at up to 2x the cold bytes.
    Block,
    /// As `Range`, and a small read's miss fills the whole block while small reads' neighbours
    /// keep coming (see [`crate::neighbours`]).
    Auto,
}

/// Why the cache could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A classification rule does not compile.
    #[error(transparent)]
    Rules(#[from] crate::classify::RuleError),
    /// A store's disk tier could not be opened or recovered.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Counters of one store.
#[derive(Default)]
pub struct StoreStats {
    /// Blocks a read found holding every byte it needed.
    pub hits: AtomicU64,
    /// Blocks a read had to wait on a fill for (absent, or missing some bytes it needed).
    pub misses: AtomicU64,
    /// Blocks not admitted (data store under pressure, first touch).
    pub rejected: AtomicU64,
    /// Blocks inserted.
    pub inserted: AtomicU64,
    /// Bytes fetched from the origin for this store.
    pub origin_bytes: AtomicU64,
    /// Bytes fetched from owner nodes for this store (fleet only).
    pub peer_bytes: AtomicU64,
    /// Bytes of reads' ranges loaded from disk-tier pages.
    pub disk_served_bytes: AtomicU64,
    /// What left the DRAM tier.
    pub events: Arc<StoreEvents>,
}

/// The process-wide block cache.
pub struct BlockCache {
    /// Settings.
    pub settings: CacheSettings,
    /// Data store.
    pub data: BlockStore,
    /// Metadata store.
    pub meta: BlockStore,
    /// Data store counters.
    pub data_stats: StoreStats,
    /// Metadata store counters.
    pub meta_stats: StoreStats,
    /// Routes' own data stores (per-route quotas, see [`crate::shares`]).
    pub shares: Vec<crate::shares::Share>,
    /// Kept store: pinned tables' files, in DRAM only (see [`crate::kept`]).
    pub kept: BlockStore,
    /// Kept store counters.
    pub kept_stats: StoreStats,
    /// Every route's pinned bytes here, against `kept_bytes`.
    pub kept_ledger: crate::kept::KeptLedger,
    /// The metadata tier's removal count: how old a persisted mapping may be and still be
    /// trusted (see [`crate::tombs`]).
    pub tombs: crate::tombs::TombClock,
    /// Files pinned in part: the blocks kept, by bucket and key (see [`crate::kept`]).
    pub kept_parts: crate::kept::KeptParts,
    /// Served reads, drained by the control plane's heat ledger.
    pub access: AccessLog,
    /// Client reads that are waiting on origin fills right now (the control plane's prefetch
    /// yields to them). Touched only on the miss path.
    pub foreground_misses: AtomicU64,
    pub(crate) sketch: Sketch,
    /// Column-chunk ranges of live table files (published by the control plane).
    pub hints: crate::hints::ChunkHints,
    /// Whether small reads' neighbours come (`fill: auto`).
    pub neighbours: crate::neighbours::Neighbours,
    /// Recently served blocks (warmth hand-over in a fleet).
    pub hot: crate::hot::HotList,
    pub(crate) inflight: Inflight,
    /// Which adjacent blocks one origin GET may fetch together.
    pub(crate) run_split: Arc<dyn RunSplit>,
    classifier: Classifier,
    /// The forgets this node sent or applied lately (see [`crate::missed`]).
    pub forgets: crate::missed::ForgetLog,
    /// Who forgets go to (see [`floe_core::recent`]).
    pub recipients: floe_core::recent::RecentMembers,
    /// Whether this node must hear what it missed while away (see [`crate::missed`]).
    pub returning: crate::missed::Returning,
    /// When it opened (Unix ms; `/stats`'s `boot`).
    pub boot: u64,
}

impl BlockCache {
    /// Opens both stores (recovering their disk tiers), on one node.
    pub async fn open(settings: CacheSettings) -> Result<Arc<Self>, OpenError> {
        Self::open_with(settings, Arc::new(OneNode)).await
    }

    /// Opens both stores with a placement that decides which blocks share a fill.
    pub async fn open_with(
        settings: CacheSettings,
        run_split: Arc<dyn RunSplit>,
    ) -> Result<Arc<Self>, OpenError> {
        let classifier = Classifier::new(settings.rules.clone())?;
        let pool_bound = crate::pool::bound_for(
            settings.data.dram_bytes
                + settings.meta.dram_bytes
                + settings
                    .shares
                    .iter()
                    .map(|s| s.store.dram_bytes)
                    .sum::<usize>(),
        );
        let pool = BufferPool::shared();
        pool.set_bound(pool_bound);
        // The pinned tables' DRAM is buffers too, once pins fill it.
        // Running from here, so `/stats` never shows it off while the worker is starting.
        let (reserve, state) = match settings.populate_dram {
            true => (
                populate::reserve_for(&settings, pool_bound),
                PopulateState::Running,
            ),
            false => (0, PopulateState::Off),
        };
        pool.set_reserve(reserve);
        pool.set_populate_state(state);
        // Read before the store opens: a stamp says until when the last run was up.
        let persisted = settings.meta.disk_bytes > 0 && settings.meta.disk_dir.exists();
        let stamp = crate::missed::read_stamp(&settings.meta.disk_dir);
        let data_stats = StoreStats::default();
        let meta_stats = StoreStats::default();
        let tombs =
            crate::tombs::TombClock::open(&settings.meta.disk_dir, settings.meta.disk_bytes);
        let data = store::open(
            "data",
            &settings.data,
            settings.block_bytes as usize,
            data_stats.events.clone(),
            None,
            // The pool's free buffers are the caches' memory too: charged to the data store's
            // ceiling, as its disk tier's buffers are (`store::side_bytes`).
            pool_bound,
        )
        .await?;
        let meta = store::open(
            "metadata",
            &settings.meta,
            settings.block_bytes as usize,
            meta_stats.events.clone(),
            Some(&tombs),
            0,
        )
        .await?;
        let shares = crate::shares::open(&settings.shares, settings.block_bytes as usize).await?;
        let kept_stats = StoreStats::default();
        let kept = store::open_kept(
            settings.kept_bytes,
            settings.block_bytes as usize,
            kept_stats.events.clone(),
        )
        .await?;
        let width = (settings.data.disk_bytes.max(settings.data.dram_bytes) as u64
            / settings.block_bytes)
            .max(1024) as usize
            * 4;
        let recipients = floe_core::recent::RecentMembers::default();
        if settings.meta.disk_bytes > 0 {
            // A restarted node still tells the members it saw before (see floe_core::recent).
            recipients.keep_in(crate::missed::members_path(&settings.meta.disk_dir));
        }
        Ok(Arc::new(Self {
            settings,
            data,
            meta,
            data_stats,
            meta_stats,
            shares,
            kept,
            kept_stats,
            kept_ledger: Default::default(),
            kept_parts: Default::default(),
            tombs,
            access: AccessLog::default(),
            foreground_misses: AtomicU64::new(0),
            sketch: Sketch::new(width),
            hints: Default::default(),
            neighbours: Default::default(),
            hot: crate::hot::HotList::default(),
            inflight: Inflight::default(),
            run_split,
            classifier,
            forgets: Default::default(),
            recipients,
            returning: crate::missed::Returning::at_boot(stamp, persisted),
            boot: floe_core::away::wall_ms(),
        }))
    }

    /// Bytes both stores have written to disk so far.
    pub fn disk_written(&self) -> crate::admin_docs::SettleDoc {
        let d = self
            .disk_stores()
            .map(|(store, _)| store.statistics().disk_write_bytes())
            .sum::<usize>();
        crate::admin_docs::SettleDoc {
            disk_write_bytes: d as u64,
        }
    }

    /// Writes the complete pages of the partial blocks in DRAM that the disk tier lacks (for a
    /// shutdown: what a restart can read back). They stay in DRAM.
    pub async fn write_partials(&self) {
        for (store, stats) in self.disk_stores() {
            let mut partials = Vec::new();
            store
                .flush_if(|k, v| {
                    if matches!(v, Block::Partial { .. }) {
                        partials.push((k.clone(), v.clone()));
                    }
                    false // nothing leaves: foyer's flush would write whole entries
                })
                .await;
            for (k, v) in &partials {
                stats.events.spill(k, v);
            }
            stats.events.drain().await;
        }
    }

    /// Waits until both stores' pending disk writes are done (pages queued, then foyer's).
    pub async fn settle(&self) {
        for (_, stats) in self.disk_stores() {
            stats.events.drain().await;
        }
        for (store, _) in self.disk_stores() {
            store.storage().wait().await;
        }
    }

    /// Every store with a disk tier: data, metadata and the routes' shares.
    pub fn disk_stores(&self) -> impl Iterator<Item = (&BlockStore, &StoreStats)> {
        [
            (&self.data, &self.data_stats),
            (&self.meta, &self.meta_stats),
        ]
        .into_iter()
        .chain(self.shares.iter().map(|s| (&s.store, &s.stats)))
    }

    /// The class of an object key.
    pub fn classify(&self, key: &str) -> Class {
        self.classifier.classify(key)
    }

    /// Which store block `index` of an object (`bucket`, `key`, `size` bytes, of `class`)
    /// belongs to: a pinned file's blocks to the kept store (of a file pinned in part, the
    /// blocks its pinned ranges overlap); a Parquet file's footer blocks to the metadata
    /// store; the rest to the class's store.
    pub fn store_of(
        &self,
        class: Class,
        (bucket, key): (&str, &str),
        index: u64,
        size: u64,
    ) -> Store {
        match class.store {
            Store::Data => {}
            Store::KeptPart if self.kept_parts.keeps(bucket, key, index) => return Store::Kept,
            Store::KeptPart => {}
            other => return other, // metadata, or a pinned file kept whole
        }
        let (start, len) = block_span(index, self.settings.block_bytes, size);
        if class.parquet && start + len > size.saturating_sub(self.settings.footer_bytes) {
            return Store::Metadata;
        }
        Store::Data
    }

    /// The store (and its counters) of a block of `bucket` in store class `s`: a data block of
    /// a route with a share goes to the share's store ([`crate::shares`]).
    pub(crate) fn pick(&self, s: Store, bucket: &str) -> (&BlockStore, &StoreStats) {
        match s {
            Store::Metadata => (&self.meta, &self.meta_stats),
            Store::Data | Store::KeptPart => {
                match self.shares.iter().find(|sh| *sh.bucket == *bucket) {
                    Some(sh) => (&sh.store, &sh.stats),
                    None => (&self.data, &self.data_stats),
                }
            }
            Store::Kept => (&self.kept, &self.kept_stats),
        }
    }

    /// The block as far as it holds `lo..hi` of its `len` bytes: its DRAM entry, completed
    /// from the disk tier's pages when it lacks some of those bytes (only the pages the range
    /// touches are read; what they bring is kept in DRAM again). A damaged page is dropped and
    /// missing.
    pub async fn lookup(
        &self,
        key: &BlockKey,
        s: Store,
        (len, lo, hi): (u32, u32, u32),
    ) -> Option<Block> {
        let (store, stats) = self.pick(s, &key.bucket);
        let held = self.held(key, s);
        if held.as_ref().is_some_and(|b| b.slice(lo, hi).is_some()) {
            return held;
        }
        let (block, from_disk) = crate::pages::complete(store, key, len, held, (lo, hi)).await;
        if let (Some(b), true) = (&block, from_disk > 0) {
            stats
                .disk_served_bytes
                .fetch_add(from_disk, Ordering::Relaxed);
            store::insert_growing(store, &stats.events, key.clone(), b.clone(), false);
        }
        block
    }

    /// The block's DRAM entry, if any (no I/O).
    pub fn held(&self, key: &BlockKey, s: Store) -> Option<Block> {
        self.pick(s, &key.bucket)
            .0
            .memory()
            .get(key)
            .map(|e| e.value().clone())
    }

    /// Whether a block is cached, in DRAM or (judged by its first page) on disk (no I/O).
    pub fn contains(&self, key: &BlockKey, s: Store) -> bool {
        let store = self.pick(s, &key.bucket).0;
        store.memory().contains(key) || store.storage().may_contains(&key.page(0))
    }

    /// Whether storing `incoming` more bytes would make `store` evict.
    fn under_pressure(store: &BlockStore, incoming: usize) -> bool {
        let m = store.memory();
        m.usage() + incoming >= m.capacity()
    }

    /// Whether this node keeps a copy of a data block a peer owns and just sent it: only while
    /// the store has room for it. Under pressure a replica would push out a block this node
    /// owns (FIFO eviction has no priorities), and with clients spread over every node each node
    /// would converge on the same blocks: three nodes held what one holds, and a set that fit
    /// the fleet's DRAM went back to the origin for 40% of its bytes on every pass. The cost: a
    /// hot block's readers on other nodes take a peer hop once the store is full. Other stores
    /// keep replicas subject to admission alone.
    pub fn keeps_replica(&self, key: &BlockKey, s: Store, incoming: usize) -> bool {
        s != Store::Data || !Self::under_pressure(self.pick(s, &key.bucket).0, incoming)
    }

    /// Stores a filled block, subject to admission.
    pub fn admit(&self, key: BlockKey, block: Block, s: Store) {
        let (store, stats) = self.pick(s, &key.bucket);
        if s == Store::Data
            && Self::under_pressure(store, block.footprint())
            && self.sketch.estimate(key.stable_hash()) < self.settings.admission_threshold
        {
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        stats.inserted.fetch_add(1, Ordering::Relaxed);
        let every_insert = match s {
            Store::Data | Store::KeptPart => self.settings.data.write_every_insert,
            Store::Metadata => self.settings.meta.write_every_insert,
            Store::Kept => false,
        };
        let events = &stats.events;
        match block {
            Block::Full(_) => store::insert_final(store, events, key, block),
            Block::Partial { .. } => store::insert_growing(store, events, key, block, every_insert),
        }
    }

    fn map_key(bucket: &Arc<str>, key: &Arc<str>) -> BlockKey {
        BlockKey {
            bucket: bucket.clone(),
            key: key.clone(),
            etag: Arc::from(""),
            block_bytes: 0,
            index: u64::MAX,
        }
    }

    /// Persists an immutable object's mapping in the metadata store.
    pub fn save_mapping(&self, bucket: &Arc<str>, key: &Arc<str>, m: &Mapping) {
        store::insert_final(
            &self.meta,
            &self.meta_stats.events,
            Self::map_key(bucket, key),
            Block::Full(Bytes::from(m.encode_stamped(self.tombs.now()))),
        );
    }

    /// A persisted mapping, if any.
    pub async fn load_mapping(
        &self,
        bucket: &Arc<str>,
        key: &Arc<str>,
        class: Class,
    ) -> Option<Mapping> {
        let e = self.meta.get(&Self::map_key(bucket, key)).await.ok()??;
        let Block::Full(b) = e.value() else {
            return None;
        };
        let (m, stamp) = Mapping::decode_stamped(std::str::from_utf8(b).ok()?, class)?;
        if !self.tombs.covers(stamp) {
            // Older than the tombstone ring: a removal of it may be forgotten. Resolved again.
            tracing::debug!(key = %key, ?stamp, "persisted mapping past the tombstone horizon");
            return None;
        }
        Some(m)
    }

    /// Every (index, key, store) of one object version's blocks.
    pub(crate) fn blocks_of_version<'a>(
        &'a self,
        bucket: &'a Arc<str>,
        key: &'a Arc<str>,
        m: &'a Mapping,
    ) -> impl Iterator<Item = (BlockKey, Store)> + 'a {
        let bs = self.settings.block_bytes;
        let n = if m.size == 0 {
            0
        } else {
            (m.size - 1) / bs + 1
        };
        (0..n).map(move |index| {
            let k = BlockKey {
                bucket: bucket.clone(),
                key: key.clone(),
                etag: m.etag_key.clone(),
                block_bytes: bs as u32,
                index,
            };
            (k, self.store_of(m.class, (bucket, key), index, m.size))
        })
    }

    /// Removes every block of one object version; returns how many block keys were dropped.
    pub fn remove_blocks(&self, bucket: &Arc<str>, key: &Arc<str>, m: &Mapping) -> u64 {
        let mut n = 0;
        let bs = self.settings.block_bytes;
        for (k, s) in self.blocks_of_version(bucket, key, m) {
            let store = self.pick(s, &k.bucket).0;
            // Only what the disk tier indexes gets a tombstone: each one takes a slot of
            // foyer's ring, which bounds how long persisted mappings are trusted (tombs.rs).
            store.memory().remove(&k);
            let len = block_span(k.index, bs, m.size).1;
            let page = u64::from(crate::pages::page_bytes(k.block_bytes));
            let keys =
                std::iter::once(k.clone()).chain((0..len.div_ceil(page)).map(|p| k.page(p as u32)));
            for key in keys {
                if store.storage().may_contains(&key) {
                    store.storage().delete(&key);
                }
            }
            n += 1;
        }
        n
    }

    /// Counts one touch of every data block of an object version (a write through Floe is
    /// its first touch, so reading it back passes second-touch admission).
    pub fn touch_blocks(&self, bucket: &Arc<str>, key: &Arc<str>, m: &Mapping) {
        for (k, s) in self.blocks_of_version(bucket, key, m) {
            if s == Store::Data {
                self.sketch.touch(k.stable_hash());
            }
        }
    }

    /// Forgets a persisted mapping.
    pub fn forget_mapping(&self, bucket: &Arc<str>, key: &Arc<str>) {
        self.meta.remove(&Self::map_key(bucket, key));
    }
}

impl Drop for BlockCache {
    /// Each store's listener holds the store (to write pages): let both go.
    fn drop(&mut self) {
        for (_, stats) in self.disk_stores() {
            stats.events.detach();
        }
    }
}
