//! The buffer a fill writes one block piece into.
//!
//! A range fill into a block that already holds spans used to write the fetched bytes into a
//! buffer of their own, then merge it with the held span it touches: `join_run` copied both
//! into a third buffer (3.5% of a cold row's samples, and the page faults of that fresh
//! buffer, in `perf` of the 1 MiB DRAM-full row). A [`Piece`] starts with the held bytes just
//! before the fetch and ends with those just after, so the fetched bytes are copied once, into
//! the buffer the block keeps, and the merge keeps that buffer as it is.

use bytes::Bytes;

use crate::block::{Block, Span};
use crate::pool::{BufferPool, Filling};

/// One block piece being filled: held head, fetched bytes, held tail.
pub(crate) struct Piece {
    buf: Filling,
    /// Offset in the block of the buffer's first byte.
    off: u32,
    /// Bytes in the buffer once the fetched ones are in (the head's and theirs).
    fetched_end: usize,
    /// The held bytes that follow the fetched ones, appended by [`Piece::finish`].
    tail: Option<Bytes>,
}

impl Piece {
    /// A piece for fetching bytes `from..to` of a block that holds `held` (if anything).
    pub(crate) fn start(from: u32, to: u32, held: Option<&Block>) -> Piece {
        let (head, tail) = held.map_or((None, None), |b| b.around(from, to));
        let head_len = head.as_ref().map_or(0, |h| h.bytes.len());
        let tail_len = tail.as_ref().map_or(0, Bytes::len);
        let fetched_end = head_len + (to - from) as usize;
        let mut buf = BufferPool::shared().take(fetched_end + tail_len);
        let off = match &head {
            Some(h) => {
                buf.extend_from_slice(&h.bytes);
                h.off
            }
            None => from,
        };
        Piece {
            buf,
            off,
            fetched_end,
            tail,
        }
    }

    /// Fetched bytes still to come.
    pub(crate) fn room(&self) -> usize {
        self.fetched_end - self.buf.len()
    }

    /// Appends fetched bytes (at most [`Piece::room`]).
    pub(crate) fn extend(&mut self, fetched: &[u8]) {
        debug_assert!(fetched.len() <= self.room());
        self.buf.extend_from_slice(fetched);
    }

    /// The piece as one span: head, fetched bytes, tail.
    pub(crate) fn finish(mut self) -> Span {
        if let Some(tail) = self.tail.take() {
            self.buf.extend_from_slice(&tail);
        }
        Span {
            off: self.off,
            bytes: self.buf.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::block::test_span as span;

    /// The fill's steps for bytes `from..to`, fed in chunks of `chunk` bytes.
    fn filled(from: u32, to: u32, held: Option<&Block>, chunk: usize) -> Span {
        let mut piece = Piece::start(from, to, held);
        let fetched = span(from, to - from).bytes;
        for part in fetched.chunks(chunk.max(1)) {
            assert!(piece.room() >= part.len());
            piece.extend(part);
        }
        assert_eq!(piece.room(), 0);
        piece.finish()
    }

    #[test]
    fn a_gap_between_held_spans_becomes_one_buffer_the_merge_keeps() {
        let held = Block::of(100, span(10, 20)).merge(span(60, 20));
        let piece = filled(30, 60, Some(&held), 7);
        assert_eq!((piece.off, piece.bytes.len()), (10, 70));
        let merged = held.merge(piece.clone());
        let Block::Partial { spans, .. } = &merged else {
            panic!("not partial: {merged:?}");
        };
        assert_eq!(spans.len(), 1);
        // The fill's buffer is the block's: no join copied it.
        assert_eq!(spans[0].bytes.as_ptr(), piece.bytes.as_ptr());
        assert_eq!(spans[0], span(10, 70));
    }

    #[test]
    fn the_rest_of_a_block_makes_it_full_in_the_fills_buffer() {
        let held = Block::of(64, span(0, 40));
        let piece = filled(40, 64, Some(&held), 64);
        let merged = held.merge(piece.clone());
        let Block::Full(bytes) = &merged else {
            panic!("not full: {merged:?}");
        };
        assert_eq!(bytes.as_ptr(), piece.bytes.as_ptr());
        assert_eq!(bytes, &span(0, 64).bytes);
    }

    #[test]
    fn nothing_held_or_nothing_touching_is_the_fetch_alone() {
        assert_eq!(filled(5, 9, None, 3), span(5, 4));
        let apart = Block::of(100, span(0, 4)).merge(span(50, 4));
        assert_eq!(filled(10, 20, Some(&apart), 3), span(10, 10));
        let full = Block::Full(span(0, 8).bytes);
        assert_eq!(full.around(2, 4), (None, None));
    }

    proptest! {
        /// For any held spans and any fetch of what a read misses, the block the fill makes
        /// is the one merging the fetched bytes alone made.
        #[test]
        fn a_piece_merges_to_the_block_the_fetch_alone_did(
            held in proptest::collection::vec((0u32..200, 1u32..60), 1..5),
            read in (0u32..256, 1u32..256),
            chunk in 1usize..300,
        ) {
            let len = 256;
            let mk = |(off, l): (u32, u32)| span(off, l.min(len - off));
            let mut block = Block::empty(len);
            for h in held {
                block = block.merge(mk(h));
            }
            let (lo, hi) = (read.0, (read.0 + read.1).min(len));
            prop_assume!(lo < hi);
            let Some((from, to)) = block.missing(lo, hi) else {
                return Ok(());
            };
            let piece = filled(from, to, Some(&block), chunk);
            let want = block.merge(span(from, to - from));
            let got = block.merge(piece);
            prop_assert_eq!(&got, &want);
            prop_assert!(got.slice(lo, hi).is_some());
        }
    }
}
