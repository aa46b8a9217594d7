//! The two foyer stores (data; metadata) and the block key. Geometry is part of the key, so a
//! node with another block size misses instead of serving wrong offsets.

use std::path::PathBuf;
use std::sync::Arc;

use foyer::{
    BlockEngineConfig, Code, DeviceBuilder, FsDeviceBuilder, HybridCache, HybridCacheBuilder,
    HybridCachePolicy, HybridCacheProperties, Location, PsyncIoEngineConfig, RecoverMode,
};

use crate::block::Block;
use crate::page_writer::{PageCounters, PageQueue};

/// Identity of one cached block: (bucket, key, ETag, block size, index). `index == u64::MAX`
/// with an empty ETag marks a key->ETag mapping record instead of bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockKey {
    /// Bucket.
    pub bucket: Arc<str>,
    /// Object key.
    pub key: Arc<str>,
    /// ETag of the version the bytes belong to.
    pub etag: Arc<str>,
    /// Block geometry.
    pub block_bytes: u32,
    /// Block index.
    pub index: u64,
}

impl BlockKey {
    /// A stable 64-bit hash (for the admission sketch).
    pub fn stable_hash(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for part in [
            self.bucket.as_bytes(),
            self.key.as_bytes(),
            self.etag.as_bytes(),
        ] {
            h.update(part);
            h.update(&[0]);
        }
        h.update(&self.index.to_le_bytes());
        h.update(&self.block_bytes.to_le_bytes());
        h.digest()
    }
}

fn put_str(w: &mut impl std::io::Write, s: &str) -> foyer::Result<()> {
    (s.len() as u32).encode(w)?;
    w.write_all(s.as_bytes()).map_err(foyer::Error::io_error)
}

fn get_str(r: &mut impl std::io::Read) -> foyer::Result<Arc<str>> {
    let len = u32::decode(r)? as usize;
    let mut v = vec![0u8; len];
    r.read_exact(&mut v).map_err(foyer::Error::io_error)?;
    let s = String::from_utf8(v).map_err(|e| {
        foyer::Error::io_error(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    })?;
    Ok(Arc::from(s))
}

/// Length-prefixed fields; written here so keys and values need no serde (foyer's serde mode
/// would route them through bincode).
impl Code for BlockKey {
    fn encode(&self, w: &mut impl std::io::Write) -> foyer::Result<()> {
        put_str(w, &self.bucket)?;
        put_str(w, &self.key)?;
        put_str(w, &self.etag)?;
        self.block_bytes.encode(w)?;
        self.index.encode(w)
    }

    fn decode(r: &mut impl std::io::Read) -> foyer::Result<Self> {
        Ok(Self {
            bucket: get_str(r)?,
            key: get_str(r)?,
            etag: get_str(r)?,
            block_bytes: u32::decode(r)?,
            index: u64::decode(r)?,
        })
    }

    fn estimated_size(&self) -> usize {
        12 + self.bucket.len() + self.key.len() + self.etag.len() + 12
    }
}

/// Counts what leaves a store's DRAM tier (foyer reports it through this listener), and
/// writes the complete pages of a block evicted from it that the disk tier lacks (see
/// [`crate::pages`]), through the store's page writer ([`crate::page_writer`]).
#[derive(Default)]
pub struct StoreEvents {
    /// Entries evicted to make room.
    pub evictions: std::sync::atomic::AtomicU64,
    /// Entries that left for any reason (evicted, replaced, removed).
    pub leaves: std::sync::atomic::AtomicU64,
    /// Pages handed to the disk tier (when stored whole, or as their block left DRAM), and
    /// those dropped for a full queue.
    pub pages: Arc<PageCounters>,
    /// The store, once open, and its page writer; taken away when the cache closes (the store
    /// holds this listener: without that, neither would ever be dropped; and the writer stops
    /// once its queue is written).
    writer: std::sync::RwLock<Option<(BlockStore, PageQueue)>>,
}

impl StoreEvents {
    /// Starts the page writer of `store` (on the current runtime) and lets evictions write
    /// their pages through it.
    pub fn attach(&self, store: &BlockStore, buffer_bytes: usize) {
        // A batch is half of foyer's write buffer (records and tombstones share it). The queue
        // holds four buffers' worth (16-64 MiB): bursts of evictions or stored blocks wait,
        // not drop. What it holds of blocks still in DRAM costs nothing more; of evicted ones,
        // memory until written, counted inside the DRAM ceiling ([`side_bytes`]).
        let queue = PageQueue::start(
            store.clone(),
            self.pages.clone(),
            buffer_bytes / 2,
            PAGE_QUEUE_BUFFERS * buffer_bytes,
        );
        if let Ok(mut w) = self.writer.write() {
            *w = Some((store.clone(), queue));
        }
    }

    /// Stops writing pages (the cache closes); what was queued is still written.
    pub fn detach(&self) {
        if let Ok(mut w) = self.writer.write() {
            *w = None;
        }
    }

    /// Queues `block`'s complete pages the disk tier lacks.
    pub fn spill(&self, key: &BlockKey, block: &Block) {
        let Ok(w) = self.writer.read() else { return };
        if let Some((store, queue)) = w.as_ref() {
            crate::pages::spill(store, queue, key, block);
        }
    }

    /// Waits until the pages queued so far are on the device.
    pub async fn drain(&self) {
        let wait = match self.writer.read() {
            Ok(w) => w.as_ref().map(|(_, queue)| queue.drain()),
            Err(_) => None,
        };
        if let Some(wait) = wait {
            wait.await;
        }
    }
}

impl foyer::EventListener for StoreEvents {
    type Key = BlockKey;
    type Value = Block;

    fn on_leave(&self, reason: foyer::Event, key: &BlockKey, value: &Block) {
        use std::sync::atomic::Ordering::Relaxed;
        if key.is_page() {
            return; // a page written to disk (foyer reports the written entry leaving)
        }
        self.leaves.fetch_add(1, Relaxed);
        if reason == foyer::Event::Evict {
            self.evictions.fetch_add(1, Relaxed);
            self.spill(key, value);
        }
    }
}

/// Byte ceilings and location of one store.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// DRAM ceiling in bytes.
    pub dram_bytes: usize,
    /// Folder of the disk tier.
    pub disk_dir: PathBuf,
    /// Disk ceiling in bytes.
    pub disk_bytes: usize,
    /// Write every insert to disk at once (`cache.disk_writes: every_insert`) instead of
    /// growing blocks when they leave DRAM.
    pub write_every_insert: bool,
}

/// A hybrid (DRAM + disk) store of blocks.
pub type BlockStore = HybridCache<BlockKey, Block>;

/// Stores a value that is final as it is (a whole block, a mapping record): in DRAM, and
/// written to the disk tier now, once (a block as its pages). It is kept in DRAM as `InMem`,
/// so foyer never writes it again; a kill -9 right after keeps it (the restart tests read it
/// back).
pub fn insert_final(store: &BlockStore, events: &StoreEvents, key: BlockKey, value: Block) {
    if key.is_record() {
        let entry = store.insert_with_properties(key, value, in_dram());
        store.storage().enqueue(entry.piece(), false);
        return;
    }
    events.spill(&key, &value);
    store.insert_with_properties(key, value, in_dram());
}

/// Stores a value that may still grow (a partial block: a later range fill merges spans into
/// it and inserts it again): in DRAM only. Its complete pages reach the disk tier once, as it
/// leaves DRAM ([`StoreEvents`]), not on every merge; a crash loses the partial blocks still
/// in DRAM, which a cache may: they are refetched, never served wrong. `every_insert`
/// (`cache.disk_writes: every_insert`) writes its complete pages now as well.
pub fn insert_growing(
    store: &BlockStore,
    events: &StoreEvents,
    key: BlockKey,
    value: Block,
    every_insert: bool,
) {
    if every_insert {
        events.spill(&key, &value);
    }
    store.insert_with_properties(key, value, in_dram());
}

/// Properties of a DRAM entry: foyer's pipe never writes it (pages are written instead).
fn in_dram() -> HybridCacheProperties {
    HybridCacheProperties::default().with_location(Location::InMem)
}

/// foyer's disk region size: every entry must fit in one region.
pub const REGION_BYTES: usize = 16 << 20;

/// Why a store could not open.
#[derive(Debug, thiserror::Error)]
#[error("opening cache store {name} at {dir}: {reason}")]
pub struct StoreError {
    name: String,
    dir: String,
    reason: String,
}

/// Opens (and recovers) a store. The disk tier uses direct I/O where the filesystem allows it:
/// blocks are written once and read back only on a DRAM miss, so the page cache would only add
/// a copy of every filled byte (about a fifth of the cold path's CPU, measured with perf).
/// Filesystems without O_DIRECT (tmpfs on older kernels) get buffered I/O.
pub async fn open(
    name: &'static str,
    s: &StoreSettings,
    block_bytes: usize,
    events: Arc<StoreEvents>,
    registry: Option<&crate::tombs::TombClock>,
    reserved: usize,
) -> Result<BlockStore, StoreError> {
    let err = |reason: String| StoreError {
        name: name.to_owned(),
        dir: s.disk_dir.display().to_string(),
        reason,
    };
    std::fs::create_dir_all(&s.disk_dir).map_err(|e| err(e.to_string()))?;
    if cfg!(target_os = "linux") {
        match build(
            name,
            s,
            block_bytes,
            events.clone(),
            (true, reserved),
            registry,
        )
        .await
        {
            Ok(store) => {
                events.attach(&store, flush_buffer_bytes(s, block_bytes));
                return Ok(store);
            }
            Err(e) => {
                tracing::warn!(store = name, error = %e, "direct I/O refused; buffered disk tier")
            }
        }
    }
    let store = build(
        name,
        s,
        block_bytes,
        events.clone(),
        (false, reserved),
        registry,
    )
    .await
    .map_err(|e| err(e.to_string()))?;
    events.attach(&store, flush_buffer_bytes(s, block_bytes));
    Ok(store)
}

/// What an entry costs against a store's DRAM ceiling: its buffer, its spans and its key.
fn weight(k: &BlockKey, v: &Block) -> usize {
    v.footprint() + 24 * v.spans() + k.key.len() + k.bucket.len() + k.etag.len() + 64
}

/// Opens the kept store (pinned files, DRAM only): `bytes` of pinned files fit without an
/// eviction. One foyer shard per eight blocks of it (1 to 4: a shard's share must hold its
/// part of the set, which hashing spreads unevenly), FIFO (a hit changes nothing), and room
/// for foyer's per-entry weight and that unevenness beside `bytes` (a quarter, and two
/// blocks per shard). What is pinned is bounded by `bytes` itself ([`crate::kept`]).
pub async fn open_kept(
    bytes: usize,
    block_bytes: usize,
    events: Arc<StoreEvents>,
) -> Result<BlockStore, StoreError> {
    let shards = (bytes / (8 * block_bytes)).clamp(1, 4);
    let room = bytes + bytes / 4 + 2 * shards * block_bytes;
    HybridCacheBuilder::new()
        .with_name("kept")
        .with_event_listener(events)
        .memory(room)
        .with_shards(shards)
        .with_eviction_config(foyer::FifoConfig::default())
        .with_weighter(weight)
        .storage()
        .build()
        .await
        .map_err(|e| StoreError {
            name: "kept".to_owned(),
            dir: String::new(),
            reason: e.to_string(),
        })
}

/// The page writer's queue, in write buffers ([`StoreEvents::attach`]).
const PAGE_QUEUE_BUFFERS: usize = 4;
/// foyer's submit queue before its write buffer, in write buffers.
const SUBMIT_QUEUE_BUFFERS: usize = 2;

/// What a store with a disk tier holds in memory beside its DRAM entries: foyer's write
/// buffer and the queue before it, and the page writer's queue of pages of evicted blocks not
/// yet written; none without a disk tier. Counted inside the store's DRAM ceiling
/// ([`entry_room`]), so the ceiling bounds the process's memory and not only the entries'
/// (peak RSS went 1.4x over the ceilings with these beside them: `load/PERFORMANCE.md`,
/// "Memory").
pub fn side_bytes(s: &StoreSettings, block_bytes: usize) -> usize {
    if s.disk_bytes == 0 {
        return 0;
    }
    (1 + SUBMIT_QUEUE_BUFFERS + PAGE_QUEUE_BUFFERS) * flush_buffer_bytes(s, block_bytes)
}

/// The DRAM a store's entries may take: its ceiling less [`side_bytes`] and `reserved` (what
/// else is charged to it: the buffer pool's free buffers, to the data store), half the
/// ceiling and one block at least (a small ceiling, under the buffers' fixed minimums, still
/// caches, and exceeds its ceiling by what that leaves).
pub fn entry_room(s: &StoreSettings, block_bytes: usize, reserved: usize) -> usize {
    s.dram_bytes
        .saturating_sub(side_bytes(s, block_bytes) + reserved)
        .max(s.dram_bytes / 2)
        .max(block_bytes)
}

/// foyer's write buffer (its buffers and the queue before them are counted inside the DRAM
/// ceiling, [`side_bytes`]): a thirty-second of the ceiling, 4 MiB to foyer's default 16 MiB
/// (and two of the largest entry). The page writer's batches fit it ([`crate::page_writer`]).
fn flush_buffer_bytes(s: &StoreSettings, block_bytes: usize) -> usize {
    let largest = crate::pages::page_bytes(block_bytes as u32) as usize;
    (s.dram_bytes / 32)
        .clamp(4 << 20, 16 << 20)
        .max(2 * largest)
}

async fn build(
    name: &'static str,
    s: &StoreSettings,
    block_bytes: usize,
    events: Arc<StoreEvents>,
    (direct, reserved): (bool, usize),
    clock: Option<&crate::tombs::TombClock>,
) -> foyer::Result<BlockStore> {
    let room = entry_room(s, block_bytes, reserved);
    let device = FsDeviceBuilder::new(&s.disk_dir).with_capacity(s.disk_bytes);
    #[cfg(target_os = "linux")]
    let device = device.with_direct(direct);
    #[cfg(not(target_os = "linux"))]
    let _ = direct;
    let flush_buffer = flush_buffer_bytes(s, block_bytes);
    let mut builder = HybridCacheBuilder::new();
    if let Some(c) = clock {
        // foyer's own counters for this store: the tombstone clock reads its deletes.
        builder = builder.with_metrics_registry(c.registry());
    }
    builder
        .with_name(name)
        // DRAM entries are `InMem`: foyer's pipe writes only the disk-only page entries
        // [`crate::pages`] makes, as they are dropped. Nothing is flushed on close: partial
        // blocks are written as pages by [`crate::cache::BlockCache::write_partials`].
        .with_policy(HybridCachePolicy::WriteOnEviction)
        .with_flush_on_close(false)
        .with_event_listener(events)
        .memory(room)
        // Each shard must hold many blocks, or a block larger than a shard's share is evicted
        // at once: one shard per 64 blocks of DRAM, 1 to 16.
        .with_shards((room / (block_bytes * 64)).clamp(1, 16))
        .with_weighter(weight)
        .storage()
        .with_io_engine_config(PsyncIoEngineConfig::new())
        // Removals (purges, deletes, replaced mappings) are logged as tombstones, so a removed
        // entry does not come back when the disk tier is recovered after a restart.
        .with_engine_config(
            BlockEngineConfig::new(device.build()?)
                .with_block_size(REGION_BYTES)
                .with_buffer_pool_size(flush_buffer)
                .with_submit_queue_size_threshold(SUBMIT_QUEUE_BUFFERS * flush_buffer)
                .with_tombstone_log(true),
        )
        .with_recover_mode(RecoverMode::Quiet)
        .build()
        .await
}
