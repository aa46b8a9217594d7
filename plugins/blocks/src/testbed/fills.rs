//! The fill policy: which bytes a miss fetches for a read that starts a known column chunk, a
//! sequential read, and small reads whose neighbours come or do not.

use std::sync::Arc;
use std::time::Duration;

use super::{pattern, settings, Bed, BS, BUCKET};
use crate::cache::Fill;
use crate::hints::{FileChunks, MAX_CHUNK_FILL};
use crate::neighbours::{EXPLORE, HORIZON, WARM_UP};
use crate::store::BlockKey;

const B: usize = BS as usize;

/// A bed whose misses follow `fill`.
async fn bed(fill: Fill) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), 64 << 20);
    s.fill = fill;
    s.max_run_blocks = 256;
    Bed::with(dir, s, Arc::new(super::origin::MemOrigin::default())).await
}

/// Publishes `chunks` (start, len) for `key` as the control plane would.
fn publish(bed: &Bed, key: &str, size: usize, chunks: &[(u64, u64)]) {
    let fc = FileChunks::new(size as u64, chunks.iter().copied());
    bed.cache
        .hints
        .publish(BUCKET, "ns.t", true, vec![(key.to_owned(), fc)]);
}

/// Lets spawned fills run to their end (paused time: the origin's scripted delays pass).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(5)).await;
}

/// A cold read of a chunk's first bytes (the GET that resolves the version) fetches the whole
/// chunk in that one GET: the engine's next reads of the chunk are hits.
#[tokio::test(start_paused = true)]
async fn a_cold_read_of_a_chunks_start_fetches_the_chunk_in_one_get() {
    let bed = bed(Fill::Range).await;
    let body = pattern(7, 8 * B);
    bed.origin.put("data/f.parquet", body.clone());
    let (start, len) = (1000u64, 3 * BS + 500);
    publish(
        &bed,
        "data/f.parquet",
        body.len(),
        &[(4, 996), (start, len)],
    );
    let r = bed
        .get("data/f.parquet", Some("bytes=1000-4999"))
        .await
        .unwrap();
    assert!(r.bytes() == &body.slice(1000..5000));
    settle().await;
    assert_eq!(
        bed.origin.counts(),
        (0, 1, len),
        "one GET, the chunk's bytes"
    );
    let rest = format!("bytes=5000-{}", start + len - 1);
    let r = bed.get("data/f.parquet", Some(&rest)).await.unwrap();
    assert!(r.bytes() == &body.slice(5000..(start + len) as usize));
    assert_eq!((r.label(), bed.origin.counts().1), ("hit", 1));
}

/// With the version known, a miss at a chunk's start fetches on to the chunk's end across
/// blocks, at most MAX_CHUNK_FILL past the read; a read elsewhere fetches only its bytes.
#[tokio::test(start_paused = true)]
async fn a_known_versions_chunk_read_fetches_to_the_chunks_end_capped() {
    let bed = bed(Fill::Range).await;
    let size = MAX_CHUNK_FILL as usize + 4 * B;
    let body = pattern(8, size);
    bed.origin.put("data/g.parquet", body.clone());
    bed.head("data/g.parquet").await.unwrap();
    let long = (2 * BS, MAX_CHUNK_FILL + BS);
    publish(&bed, "data/g.parquet", size, &[(100, 2 * BS - 100), long]);
    bed.get("data/g.parquet", Some("bytes=100-199"))
        .await
        .unwrap();
    settle().await;
    assert_eq!(bed.origin.counts().2, 2 * BS - 100, "chunk 1 whole");
    bed.get("data/g.parquet", Some("bytes=131072-131171"))
        .await
        .unwrap();
    settle().await;
    assert_eq!(
        bed.origin.counts().2,
        2 * BS - 100 + MAX_CHUNK_FILL,
        "capped"
    );
    let gets = bed.origin.counts().1;
    let end = 2 * BS + MAX_CHUNK_FILL - 1;
    let r = bed
        .get("data/g.parquet", Some(&format!("bytes=131072-{end}")))
        .await
        .unwrap();
    assert!(r.bytes() == &body.slice(2 * B..=end as usize));
    assert_eq!((r.label(), bed.origin.counts().1), ("hit", gets));
    // Not a chunk's start: only the bytes read.
    let before = bed.origin.counts().2;
    let at = end + 1 + 10;
    bed.get("data/g.parquet", Some(&format!("bytes={at}-{}", at + 99)))
        .await
        .unwrap();
    settle().await;
    assert_eq!(bed.origin.counts().2 - before, 100);
}

/// A read that starts where a cached span ends reads its block ahead: the next read is a hit.
#[tokio::test(start_paused = true)]
async fn a_sequential_read_fetches_the_rest_of_its_block() {
    let bed = bed(Fill::Range).await;
    let body = pattern(9, 2 * B);
    bed.origin.put("data/s.bin", body.clone());
    bed.head("data/s.bin").await.unwrap();
    bed.get("data/s.bin", Some("bytes=0-999")).await.unwrap();
    bed.get("data/s.bin", Some("bytes=1000-1999"))
        .await
        .unwrap();
    settle().await;
    assert_eq!(
        bed.origin.counts(),
        (1, 2, BS),
        "the second read fetched to the block's end"
    );
    let r = bed
        .get("data/s.bin", Some("bytes=2000-65535"))
        .await
        .unwrap();
    assert!(r.bytes() == &body.slice(2000..B));
    assert_eq!(r.label(), "hit");
}

/// Whether a block is in `fill: auto`'s exploration sample (keeps range fills).
fn explored(bed: &Bed, key: &str, index: u64) -> bool {
    let m = bed.filter.map.get(key).unwrap();
    let k = BlockKey {
        bucket: Arc::from(BUCKET),
        key: Arc::from(key),
        etag: m.etag_key.clone(),
        block_bytes: BS as u32,
        index,
    };
    k.stable_hash().is_multiple_of(EXPLORE)
}

/// Small reads whose neighbours come: once the estimate has seen them, a first touch fills
/// its whole block (bar the sample), and the neighbours are hits.
#[tokio::test(start_paused = true)]
async fn small_reads_with_neighbours_turn_to_whole_block_fills() {
    let bed = bed(Fill::Auto).await;
    let n = WARM_UP + 40;
    let body = pattern(10, n as usize * B);
    bed.origin.put("data/n.bin", body.clone());
    bed.head("data/n.bin").await.unwrap();
    // Learning: first touches of WARM_UP blocks, then a neighbour in each. A first touch is
    // judged when its neighbour comes, so the estimate is trusted from the last neighbour on:
    // every read here is a range fill.
    for off in [0, BS / 2] {
        for i in 0..WARM_UP {
            let a = i * BS + off;
            bed.get("data/n.bin", Some(&format!("bytes={a}-{}", a + 4095)))
                .await
                .unwrap();
        }
    }
    settle().await;
    assert_eq!(bed.origin.counts().2, 2 * WARM_UP * 4096);
    assert_eq!(bed.cache.neighbours.counts(), (WARM_UP, WARM_UP));
    // First touches 16 KiB into their blocks: each fills its whole block (bar the sample), and
    // its neighbours, before and after it, are hits.
    let skip = 16 << 10;
    let before = bed.origin.counts().2;
    let mut whole = 0;
    for i in WARM_UP..n {
        let a = i * BS + skip;
        let r = bed
            .get("data/n.bin", Some(&format!("bytes={a}-{}", a + 4095)))
            .await
            .unwrap();
        assert!(r.bytes() == &body.slice(a as usize..a as usize + 4096));
        whole += u64::from(!explored(&bed, "data/n.bin", i));
    }
    settle().await;
    assert!(whole >= 30, "the sample is one block in {EXPLORE}");
    let fetched = bed.origin.counts().2 - before;
    assert_eq!(fetched, whole * BS + (n - WARM_UP - whole) * 4096);
    let gets = bed.origin.counts().1;
    for i in (WARM_UP..n).filter(|i| !explored(&bed, "data/n.bin", *i)) {
        for a in [i * BS, i * BS + BS / 2] {
            let r = bed
                .get("data/n.bin", Some(&format!("bytes={a}-{}", a + 4095)))
                .await
                .unwrap();
            assert_eq!(r.label(), "hit");
        }
    }
    assert_eq!(bed.origin.counts().1, gets, "the neighbours cost nothing");
}

/// Small reads that never meet a neighbour keep range fills: the origin sends only the bytes
/// read.
#[tokio::test(start_paused = true)]
async fn sparse_small_reads_keep_range_fills() {
    let bed = bed(Fill::Auto).await;
    let n = 3 * WARM_UP;
    bed.origin.put("data/r.bin", pattern(11, n as usize * B));
    bed.head("data/r.bin").await.unwrap();
    for i in 0..n {
        let a = i * BS + 7;
        bed.get("data/r.bin", Some(&format!("bytes={a}-{}", a + 4095)))
            .await
            .unwrap();
    }
    settle().await;
    assert_eq!(bed.origin.counts().2, n * 4096);
    // Judged once they waited the horizon for a neighbour in vain.
    assert_eq!(bed.cache.neighbours.counts(), (0, 0));
    tokio::time::advance(HORIZON).await;
    assert!(!(bed.cache.neighbours).likely(tokio::time::Instant::now().into_std()));
    assert_eq!(bed.cache.neighbours.counts(), (n, 0));
}

/// A cold read of an immutable object begins its response once its fill's first bytes are in
/// (the header does not wait for the whole body: cut-through); a rewritable object's response
/// is held whole first, so a version change never cuts its body.
#[tokio::test(start_paused = true)]
async fn an_immutable_objects_cold_response_begins_with_its_first_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), 64 << 20);
    let mut origin = super::origin::MemOrigin::default();
    origin.piece_delay = Duration::from_millis(10);
    let bed = Bed::with(dir, s, Arc::new(origin)).await;
    for (key, held) in [("data/c.bin", false), ("c.bin", true)] {
        let body = pattern(12, 2 * B);
        bed.origin.put(key, body.clone());
        bed.head(key).await.unwrap();
        let ctx = super::ctx(floe_core::S3Op::GetObject, key);
        let t0 = tokio::time::Instant::now();
        let mut o = bed
            .filter
            .open(
                &ctx,
                &crate::serve::Ask {
                    range: Some("bytes=0-65535"),
                    head: false,
                    conditions: &Default::default(),
                    version: None,
                },
            )
            .await
            .unwrap()
            .unwrap();
        let waited = t0.elapsed();
        // 30 ms to the answer, then four 16 KiB pieces 10 ms apart.
        match held {
            false => assert!(waited < Duration::from_millis(45), "{key}: {waited:?}"),
            true => assert!(waited >= Duration::from_millis(70), "{key}: {waited:?}"),
        }
        assert_eq!(o.head.next, u64::from(held), "{key}");
        let mut sink = super::Collect::default();
        let k = floe_core::ObjectKey::parse(key).unwrap();
        let head = std::mem::take(&mut o.head);
        bed.filter
            .stream(&mut o.reader, &k, (0, BS - 1), head, &mut sink)
            .await
            .unwrap();
        assert!(sink.bytes == body.slice(..B), "{key}");
    }
}

/// A read overlapping spans a block already holds (Trino reads a column chunk, then a range
/// that starts inside it) fetches only bytes the block does not hold: never a held byte again.
#[tokio::test(start_paused = true)]
async fn a_read_overlapping_held_spans_fetches_only_what_is_missing() {
    for fill in [Fill::Range, Fill::Auto] {
        let bed = bed(fill).await;
        let body = pattern(9, 4 * B);
        let key = "data/o.parquet";
        bed.origin.put(key, body.clone());
        // Two held spans in block 1, apart: [70000, 80000] and [100000, 110000].
        for (a, b) in [(70_000usize, 80_000usize), (100_000, 110_000)] {
            let r = bed.get(key, Some(&format!("bytes={a}-{b}"))).await.unwrap();
            assert_eq!(r.bytes(), &body.slice(a..=b));
        }
        settle().await;
        let (_, _, before) = bed.origin.counts();
        let held = before;
        // A read across both spans and past them.
        let (a, b) = (75_000usize, 120_000usize);
        let r = bed.get(key, Some(&format!("bytes={a}-{b}"))).await.unwrap();
        assert_eq!(r.bytes(), &body.slice(a..=b), "{fill:?}");
        settle().await;
        let (_, _, after) = bed.origin.counts();
        let fetched = after - before;
        // At most block 1's bytes not held before this read.
        let block = B as u64;
        assert!(
            fetched <= block - 2 * 10_001,
            "{fill:?}: fetched {fetched} bytes, {held} were fetched before"
        );
    }
}

/// A read shorter than a block is small whatever its length (half a block here); a read of a
/// block's length or more is not judged: it fetches its bytes only, even while whole fills
/// run, and leaves the estimate as it was.
#[tokio::test(start_paused = true)]
async fn reads_shorter_than_a_block_are_small_and_longer_ones_are_not_judged() {
    let bed = bed(Fill::Auto).await;
    let n = WARM_UP + 8;
    let body = pattern(13, n as usize * B);
    bed.origin.put("data/h.bin", body.clone());
    bed.head("data/h.bin").await.unwrap();
    let half = BS / 2;
    // Half-block reads: a first touch of each block's first half, then a neighbour in its
    // second half.
    for off in [0, half] {
        for i in 0..WARM_UP {
            let a = i * BS + off;
            bed.get("data/h.bin", Some(&format!("bytes={a}-{}", a + half - 1)))
                .await
                .unwrap();
        }
    }
    settle().await;
    assert_eq!(bed.cache.neighbours.counts(), (WARM_UP, WARM_UP));
    // Whole fills run now: a block-long read across two fresh blocks fetches its bytes only.
    let i = (WARM_UP..n - 1)
        .find(|i| !explored(&bed, "data/h.bin", *i) && !explored(&bed, "data/h.bin", i + 1))
        .unwrap();
    let a = i * BS + 100;
    let before = bed.origin.counts().2;
    let r = bed
        .get("data/h.bin", Some(&format!("bytes={a}-{}", a + BS - 1)))
        .await
        .unwrap();
    assert!(r.bytes() == &body.slice(a as usize..(a + BS) as usize));
    settle().await;
    assert_eq!(bed.origin.counts().2 - before, BS, "only the read's bytes");
    assert_eq!(bed.cache.neighbours.counts(), (WARM_UP, WARM_UP));
    // A half-block read of a fresh block fills it whole.
    let j = (i + 2..n)
        .find(|j| !explored(&bed, "data/h.bin", *j))
        .unwrap();
    let before = bed.origin.counts().2;
    let a = j * BS + 10;
    bed.get("data/h.bin", Some(&format!("bytes={a}-{}", a + half - 1)))
        .await
        .unwrap();
    settle().await;
    assert_eq!(bed.origin.counts().2 - before, BS, "the whole block");
}

/// A read across a block the cache lacks into one it holds in part, without the bytes this
/// read needs, fetches both at once: one origin round trip, not two in turn (a 1 MiB read
/// across a partly held block took 70 ms against the origin's 35 in load/bench.py's setup).
#[tokio::test(start_paused = true)]
async fn a_read_into_a_partly_held_block_fetches_both_blocks_at_once() {
    let bed = bed(Fill::Range).await;
    let body = pattern(21, 4 * B);
    let key = "data/x.parquet";
    bed.origin.put(key, body.clone());
    bed.head(key).await.unwrap();
    // Block 2 holds its second half.
    let (a, b) = (2 * B + B / 2, 3 * B - 1);
    bed.get(key, Some(&format!("bytes={a}-{b}"))).await.unwrap();
    settle().await;
    let (_, gets_before, _) = bed.origin.counts();
    // From the middle of block 1 (not cached) into block 2's first quarter (not held).
    let (a, b) = (B + B / 2, 2 * B + B / 4);
    let started = tokio::time::Instant::now();
    let r = bed.get(key, Some(&format!("bytes={a}-{b}"))).await.unwrap();
    let took = started.elapsed();
    assert_eq!(r.bytes(), &body.slice(a..=b));
    assert_eq!(bed.origin.counts().1 - gets_before, 2, "one GET per block");
    assert!(
        took < 2 * bed.origin.latency,
        "{took:?}: block 2 was fetched after block 1, not beside it"
    );
    // Both blocks hold what was read.
    settle().await;
    let (_, gets_before, _) = bed.origin.counts();
    let r = bed.get(key, Some(&format!("bytes={a}-{b}"))).await.unwrap();
    assert_eq!(r.bytes(), &body.slice(a..=b));
    assert_eq!(bed.origin.counts().1, gets_before, "served from the cache");
}
