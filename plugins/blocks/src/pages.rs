//! The disk tier's grain: pages of a block. DRAM holds blocks (whole, or the spans range
//! fills brought); the disk tier holds their complete pages, each its own foyer entry keyed
//! like a block of page geometry ([`BlockKey::page`]). So
//!
//! - a page is written once: when its block is stored whole, or when a partial block leaves
//!   DRAM (the pages it holds whole and the disk tier lacks); a block that grows by range
//!   fills is never rewritten, and a block read back from disk adds nothing when it leaves;
//! - a read that misses DRAM loads only the pages its range touches, not the whole block.
//!
//! The bytes of a page a partial block holds only in part never reach the disk tier: after
//! the block leaves DRAM, a read of them goes to the origin again (a cache may lose bytes,
//! never serve wrong ones). foyer checksums every entry, so a damaged page is a miss.
//!
//! Why not foyer's own entry model: an entry is read and written whole, and a block that grows
//! is a new entry each time; pages are entries too, so recovery, eviction and checksums stay
//! foyer's. Why not its device API: that would mean a second allocator and index beside it.

use bytes::Bytes;
use foyer::Load;

use crate::block::{Block, Span};
use crate::page_writer::PageQueue;
use crate::store::{BlockKey, BlockStore};

/// The largest page: a 1 MiB range of a 2 MiB block loads 4 or 5 of them (1.0-1.25x).
pub const MAX_PAGE_BYTES: u32 = 256 << 10;
/// Pages per block at least, so small test geometries still page.
const MIN_PAGES: u32 = 8;
/// The smallest page: foyer pads every entry to 4 KiB.
const MIN_PAGE_BYTES: u32 = 4 << 10;
/// Marks a page key's geometry (real block sizes are far below 2 GiB).
const PAGE_FLAG: u32 = 1 << 31;

/// The page size of blocks of `block_bytes`: at most [`MAX_PAGE_BYTES`], at least eight per
/// block, and dividing the block; a block that cannot be divided is one page.
pub fn page_bytes(block_bytes: u32) -> u32 {
    let page = (block_bytes / MIN_PAGES).clamp(MIN_PAGE_BYTES, MAX_PAGE_BYTES);
    if block_bytes > page && block_bytes.is_multiple_of(page) {
        page
    } else {
        block_bytes
    }
}

impl BlockKey {
    /// Whether this key names a page on the disk tier.
    pub fn is_page(&self) -> bool {
        self.block_bytes & PAGE_FLAG != 0
    }

    /// Whether this key names a mapping record (stored whole, never paged).
    pub fn is_record(&self) -> bool {
        self.index == u64::MAX
    }

    /// The key of page `page` of this block: the version's bytes at the same absolute
    /// offset, whatever block size stored them.
    pub fn page(&self, page: u32) -> BlockKey {
        let size = page_bytes(self.block_bytes);
        let per_block = u64::from(self.block_bytes / size);
        BlockKey {
            block_bytes: PAGE_FLAG | size,
            index: self.index * per_block + u64::from(page),
            ..self.clone()
        }
    }
}

/// The pages of a block of `len` bytes that `lo..hi` touches: (page, first byte, end).
fn touched(len: u32, page: u32, lo: u32, hi: u32) -> impl Iterator<Item = (u32, u32, u32)> {
    let last = if hi == 0 { 0 } else { (hi - 1) / page + 1 };
    (lo / page..last).map(move |p| (p, p * page, ((p + 1) * page).min(len)))
}

/// Queues the pages of `block` that it holds whole and the disk tier lacks.
pub fn spill(store: &BlockStore, queue: &PageQueue, key: &BlockKey, block: &Block) {
    if key.is_page() || key.is_record() {
        return;
    }
    let page = page_bytes(key.block_bytes);
    for (p, a, b) in touched(block.block_len(), page, 0, block.block_len()) {
        if let Some(bytes) = block.slice(a, b) {
            queue.offer(store, key.page(p), bytes);
        }
    }
}

/// `held` (the block's DRAM entry, if any) with the bytes of `lo..hi` it lacks added from the
/// pages on disk; `.1`: how many bytes of `lo..hi` the loaded pages brought.
pub async fn complete(
    store: &BlockStore,
    key: &BlockKey,
    len: u32,
    held: Option<Block>,
    (lo, hi): (u32, u32),
) -> (Option<Block>, u64) {
    let page = page_bytes(key.block_bytes);
    let wanted: Vec<(u32, u32, u32)> = touched(len, page, lo, hi.min(len))
        .filter(|(_, a, b)| {
            held.as_ref()
                .is_none_or(|h| h.missing(lo.max(*a), hi.min(*b)).is_some())
        })
        .collect();
    if wanted.is_empty() {
        return (held, 0);
    }
    let loads = wanted
        .iter()
        .map(|(p, a, b)| load_page(store, key.page(*p), (b - a) as usize));
    let pages = futures::future::join_all(loads).await;
    let mut from_disk = 0;
    let mut pieces = Vec::with_capacity(wanted.len());
    for ((_, a, b), bytes) in wanted.iter().zip(pages) {
        let Some(bytes) = bytes else { continue };
        from_disk += u64::from(hi.min(*b).saturating_sub(lo.max(*a)));
        pieces.push(Span { off: *a, bytes });
    }
    // All pages in one merge: each run of touching pages and spans is copied once (a lone
    // page is kept as it is).
    let block = match (held, pieces.is_empty()) {
        (held, true) => held,
        (held, false) => Some(held.unwrap_or_else(|| Block::empty(len)).merge_all(pieces)),
    };
    (block, from_disk)
}

/// A page's bytes from the disk tier; a page of the wrong length or unreadable is dropped
/// and missing.
async fn load_page(store: &BlockStore, page_key: BlockKey, len: usize) -> Option<Bytes> {
    let found = match store.storage().load(&page_key).await {
        Ok(Load::Entry { value, .. }) => value,
        Ok(Load::Piece { piece, .. }) => piece.value().clone(),
        Ok(Load::Miss | Load::Throttled) => return None,
        Err(e) => {
            tracing::warn!(error = %e, key = %page_key.key, page = page_key.index, "dropping an unreadable disk page");
            store.storage().delete(&page_key);
            return None;
        }
    };
    match found {
        Block::Full(b) if b.len() == len => Some(b),
        _ => {
            store.storage().delete(&page_key);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_divide_blocks_and_keys_name_absolute_offsets() {
        assert_eq!(page_bytes(2 << 20), 256 << 10);
        assert_eq!(page_bytes(8 << 20), 256 << 10);
        assert_eq!(page_bytes(1 << 20), 128 << 10);
        assert_eq!(page_bytes(64 << 10), 8 << 10);
        assert_eq!(page_bytes(3_000_000), 3_000_000, "not divisible: one page");
        let key = |bs: u32, index: u64| BlockKey {
            bucket: "b".into(),
            key: "k".into(),
            etag: "e".into(),
            block_bytes: bs,
            index,
        };
        // Byte 2 MiB + 768 KiB: page 3 of block 1 of 2 MiB blocks, page 11 of block 0 of 8 MiB.
        assert_eq!(key(2 << 20, 1).page(3), key(8 << 20, 0).page(11));
        assert!(key(2 << 20, 1).page(3).is_page() && !key(2 << 20, 1).is_page());
        let middle: Vec<_> = touched(1000, 256, 200, 700).collect();
        assert_eq!(middle, vec![(0, 0, 256), (1, 256, 512), (2, 512, 768)]);
        let last: Vec<_> = touched(1000, 256, 900, 1000).collect();
        assert_eq!(last, vec![(3, 768, 1000)]);
    }
}
