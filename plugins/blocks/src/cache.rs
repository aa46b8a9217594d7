//! The block cache: two stores, admission, single-flight fills, and the per-response reader
//! that serves blocks in order as soon as each one is available.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_core::{BucketName, ObjectKey, OriginError, OriginReader};

use crate::access::AccessLog;
use crate::classify::{Class, Classifier, Rule, Store};
use crate::inflight::{self, Claim, FillError, Inflight};
use crate::mapping::Mapping;
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
    /// Data store.
    pub data: StoreSettings,
    /// Metadata store.
    pub meta: StoreSettings,
    /// Touches a data block needs before admission once the data store is under pressure.
    pub admission_threshold: u8,
    /// TTL of mutable (rewritable) objects' mappings.
    pub mutable_ttl: Duration,
    /// Classification rules, first match wins.
    pub rules: Vec<Rule>,
    /// Most blocks fetched by one ranged GET.
    pub max_run_blocks: u64,
}

/// Counters of one store.
#[derive(Default)]
pub struct StoreStats {
    /// Blocks served from the store.
    pub hits: AtomicU64,
    /// Blocks not found.
    pub misses: AtomicU64,
    /// Blocks not admitted (data store under pressure, first touch).
    pub rejected: AtomicU64,
    /// Blocks inserted.
    pub inserted: AtomicU64,
    /// Bytes fetched from the origin for this store.
    pub origin_bytes: AtomicU64,
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
    /// Served reads, drained by the control plane's heat ledger.
    pub access: AccessLog,
    /// Client reads that are waiting on origin fills right now (the control plane's prefetch
    /// yields to them). Touched only on the miss path.
    pub foreground_misses: AtomicU64,
    sketch: Sketch,
    inflight: Inflight,
    classifier: Classifier,
}

impl BlockCache {
    /// Opens both stores (recovering their disk tiers).
    pub async fn open(settings: CacheSettings) -> Result<Arc<Self>, String> {
        let classifier = Classifier::new(settings.rules.clone())?;
        let data_stats = StoreStats::default();
        let meta_stats = StoreStats::default();
        let data = store::open(
            "data",
            &settings.data,
            settings.block_bytes as usize,
            data_stats.events.clone(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let meta = store::open(
            "metadata",
            &settings.meta,
            settings.block_bytes as usize,
            meta_stats.events.clone(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let width = (settings.data.disk_bytes.max(settings.data.dram_bytes) as u64
            / settings.block_bytes)
            .max(1024) as usize
            * 4;
        Ok(Arc::new(Self {
            settings,
            data,
            meta,
            data_stats,
            meta_stats,
            access: AccessLog::default(),
            foreground_misses: AtomicU64::new(0),
            sketch: Sketch::new(width),
            inflight: Inflight::default(),
            classifier,
        }))
    }

    /// Waits until both stores' pending disk writes are done.
    pub async fn settle(&self) {
        self.data.storage().wait().await;
        self.meta.storage().wait().await;
    }

    /// The class of an object key.
    pub fn classify(&self, key: &str) -> Class {
        self.classifier.classify(key)
    }

    /// Which store block `index` of an object belongs to.
    pub fn store_of(&self, class: Class, index: u64, size: u64) -> Store {
        if class.store == Store::Metadata {
            return Store::Metadata;
        }
        let (start, len) = block_span(index, self.settings.block_bytes, size);
        if class.parquet && start + len > size.saturating_sub(self.settings.footer_bytes) {
            return Store::Metadata;
        }
        Store::Data
    }

    fn pick(&self, s: Store) -> (&BlockStore, &StoreStats) {
        match s {
            Store::Metadata => (&self.meta, &self.meta_stats),
            Store::Data => (&self.data, &self.data_stats),
        }
    }

    /// A block from its store; a damaged or unreadable entry is dropped and reported missing.
    pub async fn lookup(&self, key: &BlockKey, s: Store) -> Option<Bytes> {
        let (store, stats) = self.pick(s);
        match store.get(key).await {
            Ok(Some(e)) => {
                stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(e.value().clone())
            }
            Ok(None) => {
                stats.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, key = %key.key, index = key.index, "dropping unreadable cache entry");
                store.remove(key);
                stats.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether a block is cached (no I/O).
    pub fn contains(&self, key: &BlockKey, s: Store) -> bool {
        self.pick(s).0.contains(key)
    }

    /// Whether storing `incoming` more bytes would make the data store evict.
    fn under_pressure(&self, incoming: usize) -> bool {
        let m = self.data.memory();
        m.usage() + incoming >= m.capacity()
    }

    /// Stores a filled block, subject to admission.
    pub fn admit(&self, key: BlockKey, bytes: Bytes, s: Store) {
        let (store, stats) = self.pick(s);
        if s == Store::Data
            && self.under_pressure(bytes.len())
            && self.sketch.estimate(key.stable_hash()) < self.settings.admission_threshold
        {
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        stats.inserted.fetch_add(1, Ordering::Relaxed);
        store.insert(key, bytes);
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
        self.meta
            .insert(Self::map_key(bucket, key), Bytes::from(m.encode()));
    }

    /// A persisted mapping, if any.
    pub async fn load_mapping(
        &self,
        bucket: &Arc<str>,
        key: &Arc<str>,
        class: Class,
    ) -> Option<Mapping> {
        let e = self.meta.get(&Self::map_key(bucket, key)).await.ok()??;
        Mapping::decode(std::str::from_utf8(e.value()).ok()?, class)
    }

    /// Every (index, key, store) of one object version's blocks.
    fn blocks_of_version<'a>(
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
            (k, self.store_of(m.class, index, m.size))
        })
    }

    /// Removes every block of one object version; returns how many block keys were dropped.
    pub fn remove_blocks(&self, bucket: &Arc<str>, key: &Arc<str>, m: &Mapping) -> u64 {
        let mut n = 0;
        for (k, s) in self.blocks_of_version(bucket, key, m) {
            self.pick(s).0.remove(&k);
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

/// Identity of the object a reader serves.
#[derive(Clone)]
pub struct Target {
    /// Bucket (validated).
    pub bucket: BucketName,
    /// Key (validated).
    pub key: ObjectKey,
    /// Shared bucket text for block keys.
    pub bucket_key: Arc<str>,
    /// Shared key text for block keys.
    pub object_key: Arc<str>,
    /// The resolved version.
    pub map: Arc<Mapping>,
}

/// Serves one response's blocks in order, claiming runs of missing blocks for single-flight
/// fills and waiting on fills other requests hold.
pub struct BlockReader {
    cache: Arc<BlockCache>,
    origin: Arc<dyn OriginReader>,
    target: Target,
    last_block: u64,
    pending: VecDeque<(u64, tokio::sync::watch::Receiver<inflight::Slot>)>,
}

impl BlockReader {
    /// A reader for blocks up to `last_block` of `target`.
    pub fn new(
        cache: Arc<BlockCache>,
        origin: Arc<dyn OriginReader>,
        target: Target,
        last_block: u64,
    ) -> Self {
        Self {
            cache,
            origin,
            target,
            last_block,
            pending: VecDeque::new(),
        }
    }

    fn key(&self, index: u64) -> BlockKey {
        BlockKey {
            bucket: self.target.bucket_key.clone(),
            key: self.target.object_key.clone(),
            etag: self.target.map.etag_key.clone(),
            block_bytes: self.cache.settings.block_bytes as u32,
            index,
        }
    }

    fn store(&self, index: u64) -> Store {
        self.cache
            .store_of(self.target.map.class, index, self.target.map.size)
    }

    /// Whether block `index` is cached now (for hit/miss/partial labelling).
    pub fn cached(&self, index: u64) -> bool {
        self.cache.contains(&self.key(index), self.store(index))
    }

    /// Block `index`, from the cache or a fill.
    pub async fn block(&mut self, index: u64) -> Result<Bytes, FillError> {
        if self.pending.front().is_some_and(|(i, _)| *i == index) {
            if let Some((_, rx)) = self.pending.pop_front() {
                return inflight::wait(rx).await;
            }
        }
        let key = self.key(index);
        let store = self.store(index);
        if store == Store::Data {
            self.cache.sketch.touch(key.stable_hash());
        }
        if let Some(b) = self.cache.lookup(&key, store).await {
            return Ok(b);
        }
        match self.cache.inflight.claim(&key) {
            Claim::Theirs(rx) => inflight::wait(rx).await,
            Claim::Mine(tx) => {
                // Another fill may have stored the block and released its claim between our
                // lookup and our claim: check again before going to the origin.
                if self.cache.contains(&key, store) {
                    if let Some(b) = self.cache.lookup(&key, store).await {
                        let _ = tx.send(Some(Ok(b.clone())));
                        self.cache.inflight.release(&key);
                        return Ok(b);
                    }
                }
                let own = tx.subscribe();
                let mut run = vec![(index, key, tx)];
                let end = self
                    .last_block
                    .min(index + self.cache.settings.max_run_blocks - 1);
                for j in index + 1..=end {
                    let kj = self.key(j);
                    let sj = self.store(j);
                    if sj == Store::Data {
                        self.cache.sketch.touch(kj.stable_hash());
                    }
                    if self.cache.contains(&kj, sj) {
                        break;
                    }
                    match self.cache.inflight.claim(&kj) {
                        Claim::Mine(txj) => {
                            self.pending.push_back((j, txj.subscribe()));
                            run.push((j, kj, txj));
                        }
                        Claim::Theirs(rx) => {
                            self.pending.push_back((j, rx));
                            break;
                        }
                    }
                }
                tokio::spawn(fill(
                    self.cache.clone(),
                    self.origin.clone(),
                    self.target.clone(),
                    run,
                ));
                inflight::wait(own).await
            }
        }
    }
}

type RunItem = (u64, BlockKey, tokio::sync::watch::Sender<inflight::Slot>);

/// Fetches a run of adjacent blocks with one ranged GET (If-Match on the ETag), storing and
/// publishing each block the moment it is complete.
async fn fill(cache: Arc<BlockCache>, origin: Arc<dyn OriginReader>, t: Target, run: Vec<RunItem>) {
    let bs = cache.settings.block_bytes;
    let size = t.map.size;
    let (Some(first), Some(last)) = (run.first().map(|r| r.0), run.last().map(|r| r.0)) else {
        return;
    };
    let start = block_span(first, bs, size).0;
    let (ls, ll) = block_span(last, bs, size);
    let mut items = run.into_iter();
    let fail = |e: FillError, cur: Option<RunItem>, rest: &mut dyn Iterator<Item = RunItem>| {
        for (_, k, tx) in cur.into_iter().chain(rest) {
            let _ = tx.send(Some(Err(e.clone())));
            cache.inflight.release(&k);
        }
    };
    let mut body = match origin
        .get_range(&t.bucket, &t.key, &t.map.etag, start, ls + ll - 1)
        .await
    {
        Ok(b) => b,
        Err(e) => return fail(to_fill_error(e), None, &mut items),
    };
    let mut cur = items.next();
    let mut buf = BytesMut::with_capacity(bs as usize);
    while cur.is_some() {
        let mut chunk = match body.next().await {
            Ok(Some(c)) => c,
            Ok(None) => {
                return fail(
                    FillError::Failed("origin body ended early".into()),
                    cur,
                    &mut items,
                )
            }
            Err(e) => return fail(to_fill_error(e), cur, &mut items),
        };
        while !chunk.is_empty() {
            let Some((index, key, tx)) = cur.take() else {
                break;
            };
            let want_now = block_span(index, bs, size).1 as usize;
            let take = (want_now - buf.len()).min(chunk.len());
            buf.extend_from_slice(&chunk.split_to(take));
            if buf.len() < want_now {
                cur = Some((index, key, tx));
                continue;
            }
            let bytes = buf.split().freeze();
            let s = cache.store_of(t.map.class, index, size);
            cache
                .pick(s)
                .1
                .origin_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            cache.admit(key.clone(), bytes.clone(), s);
            let _ = tx.send(Some(Ok(bytes)));
            cache.inflight.release(&key);
            cur = items.next();
        }
    }
    // Drain to the end so the connection goes back to the pool.
    while let Ok(Some(_)) = body.next().await {}
}

fn to_fill_error(e: OriginError) -> FillError {
    match e {
        OriginError::Changed | OriginError::NotFound => FillError::Changed,
        other => FillError::Failed(other.to_string()),
    }
}
