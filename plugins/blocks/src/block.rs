//! The value of a cached block: the whole block, or the sorted, disjoint byte spans of it that
//! reads have fetched so far (range fills). Spans that touch are merged, so a range is cached
//! exactly when one span holds all of it.

use std::sync::Arc;

use bytes::Bytes;
use foyer::Code;

use crate::pool::{self, BufferPool};

/// Most spans one partial block keeps; a fill that would leave more fetches the gaps instead.
pub const MAX_SPANS: usize = 8;

/// Bytes `off..off + bytes.len()` of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Offset in the block.
    pub off: u32,
    /// The bytes.
    pub bytes: Bytes,
}

impl Span {
    fn end(&self) -> u32 {
        self.off + self.bytes.len() as u32
    }
}

/// A cached block. Cloning is a reference-count bump (no allocation on the hit path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// Every byte of the block (or a mapping record).
    Full(Bytes),
    /// Some spans of a block of `len` bytes, sorted, disjoint and not touching.
    Partial {
        /// The block's full length.
        len: u32,
        /// The spans held.
        spans: Arc<[Span]>,
    },
}

impl Block {
    /// A block holding `piece` of a block of `len` bytes (full when it covers it all).
    pub fn of(len: u32, piece: Span) -> Self {
        if piece.off == 0 && piece.bytes.len() as u32 == len {
            Block::Full(piece.bytes)
        } else {
            Block::Partial {
                len,
                spans: Arc::from(vec![piece]),
            }
        }
    }

    /// A block of `len` bytes holding none of them yet (only to merge pieces into).
    pub fn empty(len: u32) -> Self {
        Block::Partial {
            len,
            spans: Arc::from(Vec::new()),
        }
    }

    /// The block's length (every byte of it, held or not).
    pub fn block_len(&self) -> u32 {
        match self {
            Block::Full(b) => b.len() as u32,
            Block::Partial { len, .. } => *len,
        }
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        match self {
            Block::Full(b) => b.len(),
            Block::Partial { spans, .. } => spans.iter().map(|s| s.bytes.len()).sum(),
        }
    }

    /// Bytes its buffers take (their pool classes' capacities): the store's weight.
    pub fn footprint(&self) -> usize {
        match self {
            Block::Full(b) => pool::footprint(b.len()),
            Block::Partial { spans, .. } => {
                spans.iter().map(|s| pool::footprint(s.bytes.len())).sum()
            }
        }
    }

    /// Bytes `lo..hi` of the block, when one span holds them.
    pub fn slice(&self, lo: u32, hi: u32) -> Option<Bytes> {
        match self {
            Block::Full(b) => {
                (hi as usize <= b.len() && lo <= hi).then(|| b.slice(lo as usize..hi as usize))
            }
            Block::Partial { spans, .. } => spans
                .iter()
                .find(|s| s.off <= lo && hi <= s.end())
                .map(|s| s.bytes.slice((lo - s.off) as usize..(hi - s.off) as usize)),
        }
    }

    /// The smallest range holding every byte of `lo..hi` not cached (`None`: all cached).
    pub fn missing(&self, lo: u32, hi: u32) -> Option<(u32, u32)> {
        let spans = match self {
            Block::Full(_) => return None,
            Block::Partial { spans, .. } => spans,
        };
        let (mut a, mut b) = (lo, hi);
        // Trim the ends that spans already hold; what is left is one contiguous fetch.
        for s in spans.iter() {
            if s.off <= a && a < s.end() {
                a = s.end().min(b);
            }
        }
        for s in spans.iter().rev() {
            if s.off < b && b <= s.end() {
                b = s.off.max(a);
            }
        }
        (a < b).then_some((a, b))
    }

    /// The held bytes a fetch of `from..to` joins: those of the span that reaches `from` from
    /// before it (up to `from`, with their offset) and those of the span that reaches `to`
    /// from inside or at it (from `to` on).
    pub fn around(&self, from: u32, to: u32) -> (Option<Span>, Option<Bytes>) {
        let Block::Partial { spans, .. } = self else {
            return (None, None);
        };
        let head = spans.iter().find(|s| s.off < from && from <= s.end());
        let tail = spans.iter().find(|s| s.off <= to && to < s.end());
        (
            head.map(|s| Span {
                off: s.off,
                bytes: s.bytes.slice(..(from - s.off) as usize),
            }),
            tail.map(|s| s.bytes.slice((to - s.off) as usize..)),
        )
    }

    /// Whether some span ends exactly at `at` (a read continuing a cached span).
    pub fn span_ends_at(&self, at: u32) -> bool {
        match self {
            Block::Full(_) => false,
            Block::Partial { spans, .. } => spans.iter().any(|s| s.end() == at),
        }
    }

    /// Number of spans (1 for a full block).
    pub fn spans(&self) -> usize {
        match self {
            Block::Full(_) => 1,
            Block::Partial { spans, .. } => spans.len(),
        }
    }

    /// This block with `piece` added; touching or overlapping spans are joined (where they
    /// overlap the bytes are equal: both are the same version).
    pub fn merge(&self, piece: Span) -> Block {
        self.merge_all(vec![piece])
    }

    /// This block with every one of `pieces` added, each run of touching or overlapping spans
    /// joined into one buffer at once.
    /// Merging pages one at a time copied the growing span at every page: five pages of a
    /// 1 MiB read made four buffers of 0.5-1.25 MiB, three of them garbage at once, which
    /// the allocator then held as dirty pages (the memory run's RSS above its ceilings).
    pub fn merge_all(&self, pieces: Vec<Span>) -> Block {
        let (len, spans) = match self {
            Block::Full(_) => return self.clone(),
            Block::Partial { len, spans } => (*len, spans.as_ref()),
        };
        // New pieces sort before old spans at the same offset (either may give the bytes).
        let mut all: Vec<(u32, bool, Span)> = Vec::with_capacity(spans.len() + pieces.len());
        all.extend(pieces.into_iter().map(|s| (s.off, false, s)));
        all.extend(spans.iter().map(|s| (s.off, true, s.clone())));
        all.sort_by_key(|(off, old, _)| (*off, *old));
        let mut out: Vec<Span> = Vec::with_capacity(all.len());
        let mut run: Vec<Span> = Vec::new();
        let mut run_end = 0;
        for (_, _, s) in all {
            if !run.is_empty() && s.off > run_end {
                out.push(join_run(&mut run));
            }
            run_end = if run.is_empty() {
                s.end()
            } else {
                run_end.max(s.end())
            };
            run.push(s);
        }
        if !run.is_empty() {
            out.push(join_run(&mut run));
        }
        if out.len() == 1 {
            if let Some(s) = out.pop() {
                return Block::of(len, s);
            }
        }
        Block::Partial {
            len,
            spans: Arc::from(out),
        }
    }
}

/// One span of a run of touching or overlapping spans sorted by offset: the first span as it
/// is when it holds the whole run, or else one pooled buffer each byte is copied into once
/// (the first span holding a byte gives it). Empties `run`.
fn join_run(run: &mut Vec<Span>) -> Span {
    let off = run.first().map_or(0, |s| s.off);
    let end = run.iter().map(Span::end).max().unwrap_or(off);
    // The first span holds the whole run (a lone span, or a fill's piece written with the
    // held bytes around it: `crate::piece`): kept as it is, not copied.
    if run.first().is_some_and(|s| s.end() == end) {
        let first = run.drain(..).next();
        if let Some(s) = first {
            return s;
        }
    }
    let mut buf = BufferPool::shared().take((end - off) as usize);
    let mut at = off;
    for s in run.drain(..) {
        if s.end() > at {
            buf.extend_from_slice(&s.bytes[(at - s.off) as usize..]);
            at = s.end();
        }
    }
    Span {
        off,
        bytes: buf.freeze(),
    }
}

/// Bytes as foyer's `Code for Bytes` writes them (length, then the bytes), read into a pooled
/// buffer.
fn decode_bytes(r: &mut impl std::io::Read) -> foyer::Result<Bytes> {
    let len = usize::decode(r)?;
    if len > pool::MAX_POOLED {
        return Err(foyer::Error::io_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("cached block: {len} bytes is larger than any block"),
        )));
    }
    let mut buf = BufferPool::shared().take(len);
    buf.read_exact_from(r, len)
        .map_err(foyer::Error::io_error)?;
    Ok(buf.freeze())
}

/// Tag byte, then the full bytes, or the length and (offset, bytes) of each span.
impl Code for Block {
    fn encode(&self, w: &mut impl std::io::Write) -> foyer::Result<()> {
        match self {
            Block::Full(b) => {
                0u8.encode(w)?;
                b.encode(w)
            }
            Block::Partial { len, spans } => {
                1u8.encode(w)?;
                len.encode(w)?;
                (spans.len() as u32).encode(w)?;
                for s in spans.iter() {
                    s.off.encode(w)?;
                    s.bytes.encode(w)?;
                }
                Ok(())
            }
        }
    }

    fn decode(r: &mut impl std::io::Read) -> foyer::Result<Self> {
        let bad = |what: &str| {
            foyer::Error::io_error(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("cached block: {what}"),
            ))
        };
        match u8::decode(r)? {
            0 => Ok(Block::Full(decode_bytes(r)?)),
            1 => {
                let len = u32::decode(r)?;
                let n = u32::decode(r)? as usize;
                if n == 0 || n > MAX_SPANS {
                    return Err(bad("span count"));
                }
                let mut spans = Vec::with_capacity(n);
                for _ in 0..n {
                    let off = u32::decode(r)?;
                    let bytes = decode_bytes(r)?;
                    if off as u64 + bytes.len() as u64 > len as u64 {
                        return Err(bad("span past the block"));
                    }
                    spans.push(Span { off, bytes });
                }
                Ok(Block::Partial {
                    len,
                    spans: Arc::from(spans),
                })
            }
            _ => Err(bad("tag")),
        }
    }

    fn estimated_size(&self) -> usize {
        1 + 8 + self.held() + 12 * self.spans()
    }
}

/// Bytes `off..off + len` of a block whose byte `i` is `i as u8` (the tests' spans).
#[cfg(test)]
pub(crate) fn test_span(off: u32, len: u32) -> Span {
    Span {
        off,
        bytes: (off..off + len)
            .map(|i| i as u8)
            .collect::<Vec<u8>>()
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::block::test_span as span;

    #[test]
    fn full_once_spans_meet() {
        let b = Block::of(10, span(0, 4)).merge(span(6, 4));
        assert_eq!(b.spans(), 2);
        assert_eq!(b.missing(0, 10), Some((4, 6)));
        assert_eq!(b.missing(1, 3), None);
        assert!(b.span_ends_at(4));
        let full = b.merge(span(4, 2));
        assert!(matches!(full, Block::Full(_)));
        assert_eq!(full.slice(2, 8), Some(span(2, 6).bytes));
    }

    #[test]
    fn encode_round_trip_and_bad_input() {
        for b in [
            Block::Full(Bytes::from_static(b"abc")),
            Block::of(100, span(10, 5)).merge(span(50, 7)),
        ] {
            let mut v = Vec::new();
            b.encode(&mut v).unwrap();
            assert_eq!(Block::decode(&mut v.as_slice()).unwrap(), b);
        }
        let mut v = Vec::new();
        Block::of(8, span(4, 4)).encode(&mut v).unwrap();
        v[1] = 2; // len 2 < span end
        assert!(Block::decode(&mut v.as_slice()).is_err());
        assert!(Block::decode(&mut [9u8].as_slice()).is_err());
    }

    #[test]
    fn pages_merged_at_once_make_one_span_and_keep_lone_buffers() {
        let held = Block::of(64, span(40, 8));
        let lone = span(0, 4);
        let merged = held.merge_all(vec![span(8, 8), span(16, 8), lone.clone(), span(24, 16)]);
        let Block::Partial { spans, .. } = &merged else {
            panic!("not partial: {merged:?}");
        };
        assert_eq!(spans.len(), 2);
        // The lone span is the same buffer (no copy); the run is one new span of 8..48.
        assert_eq!(spans[0].bytes.as_ptr(), lone.bytes.as_ptr());
        assert_eq!((spans[1].off, spans[1].end()), (8, 48));
        assert_eq!(merged.slice(8, 48), Some(span(8, 40).bytes));
        assert!(matches!(
            merged.merge(span(4, 4)).merge_all(vec![span(48, 16)]),
            Block::Full(_)
        ));
    }

    proptest! {
        /// Merging pieces all at once holds the same bytes as merging them one by one.
        #[test]
        fn merge_all_agrees_with_one_at_a_time(held in proptest::collection::vec((0u32..200, 1u32..60), 1..4),
                                               pieces in proptest::collection::vec((0u32..200, 1u32..60), 1..6)) {
            let len = 256;
            let mk = |(off, l): (u32, u32)| span(off, l.min(len - off));
            let mut base: Option<Block> = None;
            for h in held {
                base = Some(match base { None => Block::of(len, mk(h)), Some(b) => b.merge(mk(h)) });
            }
            let base = base.unwrap();
            let at_once = base.merge_all(pieces.iter().copied().map(mk).collect());
            let one_by_one = pieces.iter().copied().fold(base, |b, p| b.merge(mk(p)));
            prop_assert_eq!(&at_once, &one_by_one);
        }

        /// Merging any pieces keeps the block's bytes right and `missing` exact: after fetching
        /// what `missing` names, the range is served.
        #[test]
        fn merge_and_missing_agree(pieces in proptest::collection::vec((0u32..200, 1u32..60), 1..6),
                                   lo in 0u32..200, n in 1u32..60) {
            let len = 256;
            let mut b: Option<Block> = None;
            for (off, l) in pieces {
                let l = l.min(len - off);
                b = Some(match b { None => Block::of(len, span(off, l)), Some(b) => b.merge(span(off, l)) });
            }
            let b = b.unwrap();
            let hi = (lo + n).min(len);
            let b = match b.missing(lo, hi) {
                None => b,
                Some((a, z)) => {
                    prop_assert!(lo <= a && a < z && z <= hi);
                    b.merge(span(a, z - a))
                }
            };
            prop_assert_eq!(b.slice(lo, hi), Some(span(lo, hi - lo).bytes));
            if let Block::Partial { spans, .. } = &b {
                for w in spans.windows(2) {
                    prop_assert!(w[0].end() < w[1].off);
                }
            }
        }
    }
}
