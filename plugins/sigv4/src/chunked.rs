//! Body stages: the hex SHA-256 check and the `aws-chunked` decoder (signed chunks, with or
//! without a signed checksum trailer, or unsigned chunks with a checksum trailer). Written here because aws-sigv4 only signs; it has no
//! verifier and no chunk decoder.

use bytes::{Bytes, BytesMut};
use floe_core::{S3Error, S3ErrorCode};
use floe_filter::BodyStage;
use sha2::{Digest, Sha256};

use crate::auth;
use floe_core::checksum::Checksum;

/// Largest chunk Floe buffers to check its signature (SDKs send 8 KiB to 1 MiB chunks).
pub const MAX_CHUNK_BYTES: usize = 16 << 20;
const MAX_LINE_BYTES: usize = 4096;
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn incomplete(msg: &str) -> S3Error {
    S3Error::new(S3ErrorCode::IncompleteBody, msg)
}

/// Checks a body against the hex SHA-256 the client signed.
#[derive(Clone)]
pub struct Sha256Stage {
    expected: String,
    hasher: Sha256,
}

impl Sha256Stage {
    /// A stage expecting `hex` (lowercase hex SHA-256).
    pub fn new(hex: &str) -> Self {
        Self {
            expected: hex.to_ascii_lowercase(),
            hasher: Sha256::new(),
        }
    }
}

impl BodyStage for Sha256Stage {
    fn feed(&mut self, body: &mut Option<Bytes>, end: bool) -> Result<(), S3Error> {
        if let Some(b) = body {
            self.hasher.update(b);
        }
        if end {
            let got = hex::encode(std::mem::take(&mut self.hasher).finalize());
            if got != self.expected {
                return Err(S3Error::new(
                    S3ErrorCode::XAmzContentSHA256Mismatch,
                    "The provided 'x-amz-content-sha256' header does not match what was computed.",
                ));
            }
        }
        Ok(())
    }

    fn plain(&mut self) -> bool {
        true // the body passes as it came
    }

    fn fresh(&self) -> Box<dyn BodyStage> {
        Box::new(Self::new(&self.expected))
    }
}

/// Signing context of STREAMING-AWS4-HMAC-SHA256-PAYLOAD.
#[derive(Clone)]
pub struct ChunkSigning {
    /// Derived signing key.
    pub key: [u8; 32],
    /// x-amz-date of the request.
    pub amz_date: String,
    /// Credential scope.
    pub scope: String,
    /// The request's own signature: the seed of the chain.
    pub seed: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(usize),
    DataEnd(u8),
    Trailer,
    Done,
}

/// Decodes `aws-chunked`. With [`ChunkSigning`], every chunk's signature is checked before its
/// bytes are forwarded and the output is the plain body. Without, the raw framing passes
/// through unchanged, the data is checksummed, and the final chunk with its trailer is held
/// back until the trailer checksum matches.
pub struct ChunkedStage {
    signing: Option<ChunkSigning>,
    prev_sig: String,
    trailer_name: Option<String>,
    checksum: Option<Checksum>,
    expected_len: u64,
    seen_len: u64,
    state: State,
    line: Vec<u8>,
    chunk: BytesMut,
    chunk_sig: String,
    held: BytesMut,
    holding: bool,
    /// Decoded output (signed or plain mode) not yet released: the newest piece waits for the
    /// next one, and the last waits until the final chunk and trailer verify, so the origin
    /// (told the decoded length) never has the whole body of a request that then fails.
    lag: Bytes,
    plain: bool,
    last: bool,
    /// Signed trailers: the canonical trailer lines (`name:value\n`, as received, the
    /// signature line left out) and the x-amz-trailer-signature sent.
    trailer_canon: String,
    trailer_sig: Option<String>,
}

impl ChunkedStage {
    /// A decoder. `trailer` names the x-amz-trailer checksum header, if any; `decoded_len` is
    /// x-amz-decoded-content-length.
    pub fn new(
        signing: Option<ChunkSigning>,
        trailer: Option<&str>,
        decoded_len: u64,
    ) -> Result<Self, S3Error> {
        let checksum = match trailer {
            Some(t) => Some(Checksum::for_header(t).ok_or_else(|| {
                S3Error::new(
                    S3ErrorCode::InvalidRequest,
                    format!("unsupported trailer {t:?}"),
                )
            })?),
            None => None,
        };
        Ok(Self::blank(
            signing,
            trailer.map(str::to_owned),
            checksum,
            decoded_len,
        ))
    }

    fn blank(
        signing: Option<ChunkSigning>,
        trailer_name: Option<String>,
        checksum: Option<Checksum>,
        expected_len: u64,
    ) -> Self {
        Self {
            prev_sig: signing.as_ref().map(|s| s.seed.clone()).unwrap_or_default(),
            signing,
            trailer_name,
            checksum,
            expected_len,
            seen_len: 0,
            state: State::Size,
            line: Vec::new(),
            plain: false,
            last: false,
            chunk: BytesMut::new(),
            chunk_sig: String::new(),
            held: BytesMut::new(),
            holding: false,
            lag: Bytes::new(),
            trailer_canon: String::new(),
            trailer_sig: None,
        }
    }

    fn take_line(&mut self, input: &[u8], pos: &mut usize) -> Result<Option<Vec<u8>>, S3Error> {
        while *pos < input.len() {
            let c = input[*pos];
            *pos += 1;
            if c == b'\n' {
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                return Ok(Some(std::mem::take(&mut self.line)));
            }
            self.line.push(c);
            if self.line.len() > MAX_LINE_BYTES {
                return Err(incomplete("aws-chunked header line too long"));
            }
        }
        Ok(None)
    }

    fn on_size_line(&mut self, line: &[u8]) -> Result<usize, S3Error> {
        let text = String::from_utf8_lossy(line);
        let (size, ext) = text.split_once(';').unwrap_or((&text, ""));
        let size = usize::from_str_radix(size.trim(), 16)
            .map_err(|_| incomplete("bad aws-chunked size line"))?;
        if size > MAX_CHUNK_BYTES {
            return Err(S3Error::new(
                S3ErrorCode::EntityTooLarge,
                "aws-chunked chunk too large",
            ));
        }
        if self.signing.is_some() {
            self.chunk_sig = ext
                .strip_prefix("chunk-signature=")
                .ok_or_else(|| {
                    S3Error::new(
                        S3ErrorCode::SignatureDoesNotMatch,
                        "chunk signature missing",
                    )
                })?
                .to_owned();
        }
        Ok(size)
    }

    fn check_chunk(&mut self) -> Result<(), S3Error> {
        let Some(s) = &self.signing else {
            return Ok(());
        };
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256}\n{}",
            s.amz_date,
            s.scope,
            self.prev_sig,
            hex::encode(Sha256::digest(&self.chunk))
        );
        let expected = auth::sign(&s.key, &sts);
        if !auth::same_signature(&expected, &self.chunk_sig) {
            return Err(S3Error::new(
                S3ErrorCode::SignatureDoesNotMatch,
                "The chunk signature we calculated does not match the signature you provided.",
            ));
        }
        self.prev_sig = expected;
        Ok(())
    }

    /// With signing, the trailer's own signature: chained from the final chunk's, over the
    /// SHA-256 of the canonical trailer lines.
    fn check_trailer(&self) -> Result<(), S3Error> {
        let Some(s) = &self.signing else {
            return Ok(());
        };
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
            s.amz_date,
            s.scope,
            self.prev_sig,
            hex::encode(Sha256::digest(self.trailer_canon.as_bytes()))
        );
        let sent = self.trailer_sig.as_deref().unwrap_or("");
        if !auth::same_signature(&auth::sign(&s.key, &sts), sent) {
            return Err(S3Error::new(
                S3ErrorCode::SignatureDoesNotMatch,
                "The trailer signature we calculated does not match the signature you provided.",
            ));
        }
        Ok(())
    }

    fn on_trailer_line(&mut self, line: &[u8]) -> Result<(), S3Error> {
        if line.is_empty() {
            return self.finish_trailer();
        }
        let text = String::from_utf8_lossy(line);
        let Some((name, value)) = text.split_once(':') else {
            return Err(incomplete("malformed trailer line"));
        };
        if self.signing.is_some() {
            let name = name.trim().to_ascii_lowercase();
            if name == "x-amz-trailer-signature" {
                self.trailer_sig = Some(value.trim().to_owned());
                return Ok(());
            }
            if self.trailer_canon.len() + line.len() > MAX_LINE_BYTES {
                return Err(incomplete("aws-chunked trailer too long"));
            }
            self.trailer_canon
                .push_str(&format!("{name}:{}\n", value.trim()));
        }
        if Some(name.trim()) == self.trailer_name.as_deref() {
            let got = self
                .checksum
                .take()
                .map(Checksum::finish_base64)
                .unwrap_or_default();
            if got != value.trim() {
                return Err(S3Error::new(
                    S3ErrorCode::BadDigest,
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        name.trim()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn finish_trailer(&mut self) -> Result<(), S3Error> {
        if self.checksum.is_some() {
            return Err(incomplete(
                "the declared x-amz-trailer checksum was not sent",
            ));
        }
        if self.trailer_name.is_some() {
            self.check_trailer()?;
        }
        if self.seen_len != self.expected_len {
            return Err(incomplete(
                "body length differs from x-amz-decoded-content-length",
            ));
        }
        self.state = State::Done;
        Ok(())
    }

    /// Runs the state machine over one input buffer, appending decoded output to `out`
    /// (signed mode) and returning, for pass-through mode, where holding back began.
    fn run(&mut self, input: &[u8], out: &mut BytesMut) -> Result<Option<usize>, S3Error> {
        let mut pos = 0;
        let mut hold_from = None;
        while pos < input.len() {
            match self.state {
                State::Size => {
                    let Some(line) = self.take_line(input, &mut pos)? else {
                        break;
                    };
                    let size = self.on_size_line(&line)?;
                    self.state = if size == 0 {
                        self.last = true;
                        self.chunk.clear();
                        self.check_chunk()?;
                        if self.signing.is_none() {
                            hold_from = Some(pos.saturating_sub(1));
                        }
                        if self.trailer_name.is_some() {
                            State::Trailer
                        } else {
                            State::DataEnd(0)
                        }
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    let n = left.min(input.len() - pos);
                    let piece = &input[pos..pos + n];
                    self.seen_len += n as u64;
                    if self.seen_len > self.expected_len {
                        return Err(incomplete(
                            "body length differs from x-amz-decoded-content-length",
                        ));
                    }
                    if let Some(c) = &mut self.checksum {
                        c.update(piece);
                    }
                    if self.signing.is_some() {
                        self.chunk.extend_from_slice(piece);
                    } else if self.plain {
                        out.extend_from_slice(piece);
                    }
                    pos += n;
                    self.state = if n == left {
                        State::DataEnd(0)
                    } else {
                        State::Data(left - n)
                    };
                }
                State::DataEnd(got) => {
                    let want = if got == 0 { b'\r' } else { b'\n' };
                    if input[pos] != want {
                        return Err(incomplete("aws-chunked chunk not followed by CRLF"));
                    }
                    pos += 1;
                    if got == 0 {
                        self.state = State::DataEnd(1);
                        continue;
                    }
                    if self.signing.is_some() && !self.chunk.is_empty() {
                        self.check_chunk()?;
                        out.extend_from_slice(&self.chunk);
                        self.chunk.clear();
                        self.state = State::Size;
                    } else if self.signing.is_some()
                        || self.holding
                        || hold_from.is_some()
                        || self.last
                    {
                        // The terminating zero-length chunk of a trailer-less body.
                        self.finish_trailer()?;
                    } else {
                        self.state = State::Size;
                    }
                }
                State::Trailer => {
                    let Some(line) = self.take_line(input, &mut pos)? else {
                        break;
                    };
                    self.on_trailer_line(&line)?;
                }
                State::Done => return Err(incomplete("bytes after the final aws-chunked chunk")),
            }
        }
        Ok(hold_from)
    }
}

impl ChunkedStage {
    /// What of the decoded output may go on now: the piece held since the last call (the
    /// newest is held in its place), or all of it once the body verified to its end.
    fn release(&mut self, out: BytesMut) -> Bytes {
        let newest = out.freeze();
        if self.state != State::Done {
            if newest.is_empty() {
                return Bytes::new();
            }
            return std::mem::replace(&mut self.lag, newest);
        }
        let held = std::mem::take(&mut self.lag);
        if held.is_empty() {
            return newest;
        }
        let mut all = BytesMut::with_capacity(held.len() + newest.len());
        all.extend_from_slice(&held);
        all.extend_from_slice(&newest);
        all.freeze()
    }
}

impl BodyStage for ChunkedStage {
    fn feed(&mut self, body: &mut Option<Bytes>, end: bool) -> Result<(), S3Error> {
        let input = body.take().unwrap_or_default();
        let mut out = BytesMut::new();
        let hold_from = self.run(&input, &mut out)?;
        if self.signing.is_some() || self.plain {
            *body = Some(self.release(out));
        } else if self.holding {
            self.held.extend_from_slice(&input);
        } else if let Some(at) = hold_from {
            self.holding = true;
            self.held.extend_from_slice(&input[at..]);
            *body = Some(input.slice(..at));
        } else {
            *body = Some(input);
        }
        if self.state == State::Done && self.holding {
            let mut pass = body.take().map(BytesMut::from).unwrap_or_default();
            pass.extend_from_slice(&self.held);
            self.held.clear();
            self.holding = false;
            *body = Some(pass.freeze());
        }
        if end && self.state != State::Done {
            return Err(incomplete("You did not provide the number of bytes specified by the Content-Length HTTP header."));
        }
        Ok(())
    }

    fn plain(&mut self) -> bool {
        self.plain = true;
        true
    }

    fn fresh(&self) -> Box<dyn BodyStage> {
        let checksum = self.trailer_name.as_deref().and_then(Checksum::for_header);
        Box::new(Self::blank(
            self.signing.clone(),
            self.trailer_name.clone(),
            checksum,
            self.expected_len,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn trailer_body(data: &[u8], chunk: usize, checksum: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for c in data.chunks(chunk.max(1)) {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{checksum}\r\n\r\n").as_bytes());
        out
    }

    fn crc(data: &[u8]) -> String {
        let mut c = Checksum::for_header("x-amz-checksum-crc32").unwrap();
        c.update(data);
        c.finish_base64()
    }

    fn run(body: &[u8], split: usize, len: u64) -> (Vec<u8>, Result<(), S3Error>) {
        let mut stage = ChunkedStage::new(None, Some("x-amz-checksum-crc32"), len).unwrap();
        let mut out = Vec::new();
        let pieces: Vec<&[u8]> = body.chunks(split.max(1)).collect();
        for (i, p) in pieces.iter().enumerate() {
            let mut b = Some(Bytes::copy_from_slice(p));
            if let Err(e) = stage.feed(&mut b, i + 1 == pieces.len()) {
                return (out, Err(e));
            }
            out.extend_from_slice(&b.unwrap_or_default());
        }
        (out, Ok(()))
    }

    #[test]
    fn sha256_stage_checks() {
        let mut s = Sha256Stage::new(&hex::encode(Sha256::digest(b"abc")));
        s.feed(&mut Some(Bytes::from_static(b"ab")), false).unwrap();
        s.feed(&mut Some(Bytes::from_static(b"c")), true).unwrap();
        let mut s = Sha256Stage::new(&hex::encode(Sha256::digest(b"abc")));
        let e = s
            .feed(&mut Some(Bytes::from_static(b"abd")), true)
            .unwrap_err();
        assert_eq!(e.code, S3ErrorCode::XAmzContentSHA256Mismatch);
    }

    proptest! {
        #[test]
        fn trailer_passthrough_is_byte_exact(data in proptest::collection::vec(any::<u8>(), 0..3000),
                                              chunk in 1usize..700, split in 1usize..900) {
            let body = trailer_body(&data, chunk, &crc(&data));
            let (out, res) = run(&body, split, data.len() as u64);
            prop_assert!(res.is_ok());
            prop_assert_eq!(out, body);
        }

        #[test]
        fn bad_trailer_never_forwards_the_final_chunk(data in proptest::collection::vec(any::<u8>(), 1..3000),
                                                       chunk in 1usize..700, split in 1usize..900) {
            let body = trailer_body(&data, chunk, "AAAAAA==");
            let (out, res) = run(&body, split, data.len() as u64);
            prop_assert_eq!(res.unwrap_err().code, S3ErrorCode::BadDigest);
            // What was forwarded stops before the terminating "0\r\n": the origin cannot complete it.
            let tail = "0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
            prop_assert!(out.len() <= body.len() - tail.len() + 2);
        }
    }
}
