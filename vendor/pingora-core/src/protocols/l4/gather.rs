// Floe patch (vendor/README.md): this whole file is new.
//
//! A write buffer that gathers instead of copying large writes.
//!
//! tokio's `BufWriter`, which this replaces under [`super::stream::Stream`], copies every write
//! that fits its spare capacity: with a write buffer a response fits in (so that a response's
//! header and body leave in one `write`), every body byte is copied once in user space before
//! the kernel copies it again. `GatherWriter` copies only small writes (under [`GATHER_FROM`])
//! that fit its spare room; a larger write, or one it has no room for, leaves together with what
//! is buffered in one vectored write (`writev(buffered, data...)`), so a small response still
//! leaves in one system call and its body is never copied in user space, whatever the buffer's
//! capacity.
//!
//! Self-contained (std and tokio only) so that Floe's own tests compile this file as it is
//! (`proxy/tests/gather_writer.rs`).

use std::fmt;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes at least this long are never copied into the buffer: they are written with it.
/// Below it a copy costs less than the system call it may save (a header, chunk framing).
pub const GATHER_FROM: usize = 16 << 10;

/// Slices a vectored write is gathered with, the buffer's included; a vectored write of more
/// slices flushes the buffer first.
const GATHER_SLICES: usize = 8;

/// A write buffer of a fixed capacity over `W` (see the module's doc).
pub struct GatherWriter<W> {
    inner: W,
    buf: Vec<u8>,
    /// Bytes at the front of `buf` the inner writer has taken already.
    written: usize,
}

impl<W> fmt::Debug for GatherWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatherWriter")
            .field("capacity", &self.buf.capacity())
            .field("buffered", &(self.buf.len() - self.written))
            .finish()
    }
}

impl<W> GatherWriter<W> {
    /// A writer whose buffer holds `capacity` bytes; 0 writes straight through.
    pub fn with_capacity(capacity: usize, inner: W) -> Self {
        GatherWriter {
            inner,
            buf: Vec::with_capacity(capacity),
            written: 0,
        }
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// The inner writer; anything still buffered is lost (as with `BufWriter::into_inner`).
    pub fn into_inner(self) -> W {
        self.inner
    }

    /// The bytes buffered and not yet written.
    pub fn buffer(&self) -> &[u8] {
        &self.buf[self.written..]
    }

    fn spare(&self) -> usize {
        self.buf.capacity() - self.buf.len()
    }

    /// Marks `n` buffered bytes as written; an emptied buffer starts again at its front.
    fn consume(&mut self, n: usize) {
        self.written += n;
        if self.written >= self.buf.len() {
            self.buf.clear();
            self.written = 0;
        }
    }
}

impl<W: AsyncWrite + Unpin> GatherWriter<W> {
    /// Writes out everything buffered.
    fn poll_flush_buf(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.buffer().is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.consume(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Writes what is buffered gathered with `data` (fewer than [`GATHER_SLICES`] slices) until
    /// the buffer is empty. `Some(n)`: a write took `n` bytes of `data` too, which count as
    /// written; `None`: the buffer is empty and none of `data` went yet.
    fn poll_gather(
        &mut self,
        cx: &mut Context<'_>,
        data: &[IoSlice<'_>],
    ) -> Poll<io::Result<Option<usize>>> {
        while !self.buffer().is_empty() {
            let buffered = self.buf.len() - self.written;
            let mut slices = [IoSlice::new(&[]); GATHER_SLICES];
            slices[0] = IoSlice::new(&self.buf[self.written..]);
            slices[1..=data.len()].copy_from_slice(data);
            let gathered = &slices[..=data.len()];
            let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, gathered))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.consume(n.min(buffered));
            if n > buffered {
                return Poll::Ready(Ok(Some(n - buffered)));
            }
        }
        Poll::Ready(Ok(None))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for GatherWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if data.len() < GATHER_FROM && data.len() <= me.spare() {
            me.buf.extend_from_slice(data);
            return Poll::Ready(Ok(data.len()));
        }
        // Large, or more than the buffer has room for: written with what is buffered.
        match ready!(me.poll_gather(cx, &[IoSlice::new(data)]))? {
            Some(n) => Poll::Ready(Ok(n)),
            None => Pin::new(&mut me.inner).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let total = bufs
            .iter()
            .fold(0usize, |sum, b| sum.saturating_add(b.len()));
        if total < GATHER_FROM && total <= me.spare() {
            bufs.iter().for_each(|b| me.buf.extend_from_slice(b));
            return Poll::Ready(Ok(total));
        }
        if bufs.len() >= GATHER_SLICES {
            // More slices than gathered on the stack (Pingora writes at most three).
            ready!(me.poll_flush_buf(cx))?;
        }
        // Large, or more than the buffer has room for: written with what is buffered.
        match ready!(me.poll_gather(cx, bufs))? {
            Some(n) => Poll::Ready(Ok(n)),
            None => Pin::new(&mut me.inner).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_flush_buf(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_flush_buf(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<W: AsyncRead + Unpin> AsyncRead for GatherWriter<W> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}
