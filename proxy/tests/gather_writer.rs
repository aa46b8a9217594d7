//! The client write buffer carried in the vendored pingora-core (vendor/README.md): this file
//! compiles its source as it is and drives it with a scripted socket. A small response (header
//! then a 64 KiB body) must leave in one vectored write with no copy of the body, small writes
//! must gather, and under any split of partial writes and `Pending`s the socket must get
//! exactly the bytes written, in order.

// A test crate: its helpers (not only its #[test]s) unwrap.
#![allow(clippy::unwrap_used, clippy::panic)]

#[allow(dead_code)]
#[path = "../../vendor/pingora-core/src/protocols/l4/gather.rs"]
mod gather;

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use gather::{GatherWriter, GATHER_FROM};
use proptest::prelude::*;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// One call the socket took: vectored or not, and the bytes it accepted.
#[derive(Debug, PartialEq)]
enum Call {
    Write(usize),
    Writev(usize),
}

/// A socket that accepts at most `limit` bytes a call and, if `stall`, answers every other
/// call `Pending` (waking the task at once, as a socket that becomes writable would).
#[derive(Default)]
struct Socket {
    got: Vec<u8>,
    calls: Vec<Call>,
    limit: Option<usize>,
    stall: bool,
    stalled: bool,
}

impl Socket {
    fn stall(&mut self, cx: &mut Context<'_>) -> bool {
        if self.stall {
            self.stalled = !self.stalled;
            if self.stalled {
                cx.waker().wake_by_ref();
                return true;
            }
        }
        false
    }

    fn take(&mut self, bufs: &[IoSlice<'_>]) -> usize {
        let mut room = self.limit.unwrap_or(usize::MAX);
        let mut n = 0;
        for b in bufs {
            let part = b.len().min(room);
            self.got.extend_from_slice(&b[..part]);
            (room, n) = (room - part, n + part);
        }
        n
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let n = self.take(&[IoSlice::new(buf)]);
        self.calls.push(Call::Write(n));
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let n = self.take(bufs);
        self.calls.push(Call::Writev(n));
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test]
async fn a_header_and_a_64_kib_body_leave_in_one_vectored_write() {
    let (header, body) = (bytes(380, 1), bytes(64 << 10, 2));
    let mut w = GatherWriter::with_capacity(72 << 10, Socket::default());
    w.write_all(&header).await.unwrap();
    assert!(
        w.get_ref().calls.is_empty(),
        "the header waits for the body"
    );
    w.write_all(&body).await.unwrap();
    w.flush().await.unwrap();
    assert_eq!(w.get_ref().calls, [Call::Writev(380 + (64 << 10))]);
    assert_eq!(w.get_ref().got, [header, body].concat());
}

#[tokio::test]
async fn small_writes_gather_into_one_write_and_a_large_one_alone_is_written_as_is() {
    let mut w = GatherWriter::with_capacity(72 << 10, Socket::default());
    for seed in 0..3 {
        w.write_all(&bytes(100, seed)).await.unwrap();
    }
    w.flush().await.unwrap();
    let large = bytes(GATHER_FROM, 9);
    w.write_all(&large).await.unwrap();
    assert_eq!(
        w.get_ref().calls,
        [Call::Write(300), Call::Write(GATHER_FROM)]
    );
    assert!(w.buffer().is_empty());
}

#[tokio::test]
async fn a_zero_capacity_writes_straight_through() {
    let mut w = GatherWriter::with_capacity(0, Socket::default());
    w.write_all(&bytes(10, 0)).await.unwrap();
    w.write_all(&bytes(GATHER_FROM + 1, 1)).await.unwrap();
    assert_eq!(
        w.get_ref().calls,
        [Call::Write(10), Call::Write(GATHER_FROM + 1)]
    );
}

#[tokio::test]
async fn a_socket_taking_part_of_the_buffer_gets_the_rest_before_the_body() {
    let socket = Socket {
        limit: Some(100),
        ..Socket::default()
    };
    let (header, body) = (bytes(250, 3), bytes(GATHER_FROM * 2, 4));
    let mut w = GatherWriter::with_capacity(72 << 10, socket);
    w.write_all(&header).await.unwrap();
    w.write_all(&body).await.unwrap();
    w.flush().await.unwrap();
    let calls = &w.get_ref().calls;
    assert_eq!(
        calls[..3],
        [Call::Writev(100), Call::Writev(100), Call::Writev(100)]
    );
    // The third took the header's last 50 bytes and the body's first 50; the rest is body.
    assert!(
        calls[3..].iter().all(|c| matches!(c, Call::Write(1..=100))),
        "{calls:?}"
    );
    assert_eq!(w.get_ref().got, [header, body].concat());
}

#[tokio::test]
async fn a_write_the_buffer_has_no_room_for_leaves_with_it_in_one_vectored_write() {
    let (header, body) = (bytes(2 << 10, 5), bytes(15 << 10, 6));
    let mut w = GatherWriter::with_capacity(16 << 10, Socket::default());
    w.write_all(&header).await.unwrap();
    w.write_all(&body).await.unwrap();
    w.flush().await.unwrap();
    assert_eq!(w.get_ref().calls, [Call::Writev(17 << 10)]);
    assert_eq!(w.get_ref().got, [header, body].concat());
}

#[tokio::test]
async fn a_chunk_written_vectored_leaves_with_the_header_in_one_vectored_write() {
    let (header, frame, body) = (bytes(380, 7), b"10000\r\n".to_vec(), bytes(64 << 10, 8));
    let mut w = GatherWriter::with_capacity(16 << 10, Socket::default());
    w.write_all(&header).await.unwrap();
    let chunk = [&frame[..], &body[..], b"\r\n"];
    write_all_vectored(&mut w, &chunk).await;
    w.flush().await.unwrap();
    assert_eq!(w.get_ref().calls, [Call::Writev(380 + 7 + (64 << 10) + 2)]);
    assert_eq!(
        w.get_ref().got,
        [&header[..], &frame, &body, b"\r\n"].concat()
    );
}

/// Writes every byte of `parts` through `poll_write_vectored`, as many calls as it takes.
async fn write_all_vectored(w: &mut GatherWriter<Socket>, parts: &[&[u8]]) {
    let mut done = 0;
    let total: usize = parts.iter().map(|p| p.len()).sum();
    while done < total {
        let mut skip = done;
        let mut slices = Vec::new();
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
            } else {
                slices.push(IoSlice::new(&part[skip..]));
                skip = 0;
            }
        }
        let n = w.write_vectored(&slices).await.unwrap();
        assert!(n > 0, "a vectored write took nothing");
        done += n;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn any_split_of_partial_writes_and_stalls_delivers_exactly_the_bytes_in_order(
        sizes in prop::collection::vec(prop_oneof![0usize..200, 200usize..GATHER_FROM, GATHER_FROM..3 * GATHER_FROM], 1..8),
        capacity in prop_oneof![Just(0usize), 1usize..512, Just(72usize << 10)],
        limit in prop::option::of(1usize..40_000),
        stall in any::<bool>(),
        slices in prop::collection::vec(0usize..12, 8),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let socket = Socket { limit, stall, ..Socket::default() };
            let mut w = GatherWriter::with_capacity(capacity, socket);
            let mut want = Vec::new();
            for (i, len) in sizes.iter().enumerate() {
                let part = bytes(*len, i as u8);
                if slices[i] == 2 && part.len() > 1 {
                    let (a, b) = part.split_at(part.len() / 2);
                    // Two slices: write_all_buf hands the chain to poll_write_vectored.
                    let mut buf = Bytes::copy_from_slice(a).chain(Bytes::copy_from_slice(b));
                    w.write_all_buf(&mut buf).await.unwrap();
                } else if slices[i] > 2 {
                    // More slices, past the stack's gather (empty ones among them).
                    let cuts: Vec<&[u8]> = part.chunks(part.len().div_ceil(slices[i]).max(1))
                        .chain([&[][..]])
                        .collect();
                    write_all_vectored(&mut w, &cuts).await;
                } else {
                    w.write_all(&part).await.unwrap();
                }
                want.extend_from_slice(&part);
            }
            w.flush().await.unwrap();
            prop_assert!(w.buffer().is_empty());
            prop_assert_eq!(&w.get_ref().got, &want);
            Ok(())
        })?;
    }
}
