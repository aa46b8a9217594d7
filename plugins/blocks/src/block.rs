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

    /// This block with `piece` added; touching or overlapping spans are joined (the piece's
    /// bytes win where they overlap: both are the same version).
    pub fn merge(&self, piece: Span) -> Block {
        let (len, spans) = match self {
            Block::Full(_) => return self.clone(),
            Block::Partial { len, spans } => (*len, spans),
        };
        let mut out: Vec<Span> = Vec::with_capacity(spans.len() + 1);
        let mut cur = piece;
        for s in spans.iter() {
            if s.end() < cur.off || cur.end() < s.off {
                out.push(s.clone());
                continue;
            }
            cur = join(s, &cur);
        }
        out.push(cur);
        out.sort_by_key(|s| s.off);
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

/// Two touching or overlapping spans as one.
fn join(old: &Span, new: &Span) -> Span {
    let off = old.off.min(new.off);
    let end = old.end().max(new.end());
    let mut buf = BufferPool::shared().take((end - off) as usize);
    if old.off < new.off {
        buf.extend_from_slice(&old.bytes[..(new.off - old.off) as usize]);
    }
    buf.extend_from_slice(&new.bytes);
    if old.end() > new.end() {
        buf.extend_from_slice(&old.bytes[(new.end() - old.off) as usize..]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn span(off: u32, len: u32) -> Span {
        Span {
            off,
            bytes: (off..off + len)
                .map(|i| i as u8)
                .collect::<Vec<u8>>()
                .into(),
        }
    }

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

    proptest! {
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
