//! Reed-Solomon over stripes: an object is cut into stripes of `stripe_bytes`; each stripe into
//! `k` data shards plus `m` parity shards (reed-solomon-simd, chosen by the numbers in
//! load/PERFORMANCE.md). Fragment `i` of an object is its header followed by shard `i` of every
//! stripe, each shard followed by its CRC32C, so any stripe of any fragment is verified on its
//! own and a corrupt shard is an erasure, never input to the decoder.

use bytes::{BufMut, Bytes, BytesMut};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use serde::{Deserialize, Serialize};

/// The codec fragments record (`1`: reed-solomon-simd 3, GF(2^16), Leopard-RS layout).
pub const CODEC_RS_SIMD_3: u8 = 1;
/// Fragment header length.
pub const HEADER_LEN: usize = 64;
const MAGIC: &[u8; 8] = b"FLOEFRG\x01";
const CRC_LEN: u64 = 4;

/// Why coding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Fewer than `k` shards of a stripe passed their CRC.
    #[error("stripe {stripe}: {good} good shards, {k} needed")]
    TooFewShards {
        /// Stripe index.
        stripe: u64,
        /// Shards that verified.
        good: usize,
        /// Shards needed.
        k: usize,
    },
    /// A malformed header or geometry.
    #[error("bad fragment: {0}")]
    Bad(String),
}

/// How an object is coded: all a reader needs to find and decode any stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Data shards per stripe.
    pub k: u8,
    /// Parity shards per stripe.
    pub m: u8,
    /// Object bytes per stripe (the last may be shorter).
    pub stripe_bytes: u32,
    /// Object size.
    pub size: u64,
}

impl Geometry {
    /// Stripes in the object.
    pub fn stripes(&self) -> u64 {
        self.size.div_ceil(u64::from(self.stripe_bytes))
    }

    /// Object bytes in stripe `j`.
    pub fn stripe_len(&self, j: u64) -> u64 {
        let s = u64::from(self.stripe_bytes);
        s.min(self.size.saturating_sub(j * s))
    }

    /// Shard bytes of stripe `j` (even, as the codec needs, at least 2).
    pub fn shard_len(&self, j: u64) -> u64 {
        let per = self.stripe_len(j).div_ceil(u64::from(self.k.max(1)));
        (per + per % 2).max(2)
    }

    /// Where stripe `j`'s shard (then its CRC) starts in a fragment, header included.
    pub fn shard_offset(&self, j: u64) -> u64 {
        // Every stripe but the last is full, so their shards are all `shard_len(0)` long.
        HEADER_LEN as u64 + j * (self.shard_len(0) + CRC_LEN)
    }

    /// A fragment's length, header included.
    pub fn fragment_len(&self) -> u64 {
        match self.stripes() {
            0 => HEADER_LEN as u64,
            n => self.shard_offset(n - 1) + self.shard_len(n - 1) + CRC_LEN,
        }
    }

    /// Shards per stripe.
    pub fn width(&self) -> usize {
        usize::from(self.k) + usize::from(self.m)
    }
}

/// A fragment's header: magic, codec, geometry, index and object id, with its own CRC32C.
pub fn header(geo: &Geometry, index: u8, id: &[u8; 16]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN);
    b.put_slice(MAGIC);
    b.put_u8(CODEC_RS_SIMD_3);
    b.put_u8(geo.k);
    b.put_u8(geo.m);
    b.put_u8(index);
    b.put_u32_le(geo.stripe_bytes);
    b.put_u64_le(geo.size);
    b.put_slice(id);
    b.resize(HEADER_LEN - 4, 0);
    let crc = crc32c::crc32c(&b);
    b.put_u32_le(crc);
    b.freeze()
}

/// Parses a fragment header: its geometry, index and object id.
pub fn parse_header(h: &[u8]) -> Result<(Geometry, u8, [u8; 16]), CodecError> {
    let bad = |why: &str| CodecError::Bad(why.to_owned());
    if h.len() < HEADER_LEN || &h[..8] != MAGIC {
        return Err(bad("no fragment header"));
    }
    let crc = u32::from_le_bytes([h[60], h[61], h[62], h[63]]);
    if crc32c::crc32c(&h[..60]) != crc {
        return Err(bad("header checksum mismatch"));
    }
    if h[8] != CODEC_RS_SIMD_3 {
        return Err(bad("unknown codec"));
    }
    let geo = Geometry {
        k: h[9],
        m: h[10],
        stripe_bytes: u32::from_le_bytes([h[12], h[13], h[14], h[15]]),
        size: u64::from_le_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
    };
    let mut id = [0u8; 16];
    id.copy_from_slice(&h[24..40]);
    Ok((geo, h[11], id))
}

/// Encodes stripes; one per object being written (its working space is reused).
pub struct Encoder {
    geo: Geometry,
    rs: Option<ReedSolomonEncoder>,
}

impl Encoder {
    /// An encoder for objects of geometry `geo`.
    pub fn new(geo: Geometry) -> Self {
        Self { geo, rs: None }
    }

    /// The `k + m` shards of stripe `j` (`data` is its `stripe_len(j)` bytes), each followed
    /// by its CRC32C. CPU-bound: call it off the async threads.
    pub fn encode(&mut self, j: u64, data: &[u8]) -> Result<Vec<Bytes>, CodecError> {
        let (k, m) = (usize::from(self.geo.k), usize::from(self.geo.m));
        let len = self.geo.shard_len(j) as usize;
        let codec = |e: reed_solomon_simd::Error| CodecError::Bad(e.to_string());
        let mut shards: Vec<Vec<u8>> = (0..k)
            .map(|i| {
                let lo = (i * len).min(data.len());
                let hi = ((i + 1) * len).min(data.len());
                let mut s = Vec::with_capacity(len + 4);
                s.extend_from_slice(&data[lo..hi]);
                s.resize(len, 0);
                s
            })
            .collect();
        let rs = match &mut self.rs {
            Some(rs) => {
                rs.reset(k, m, len).map_err(codec)?;
                rs
            }
            None => self
                .rs
                .insert(ReedSolomonEncoder::new(k, m, len).map_err(codec)?),
        };
        for s in &shards {
            rs.add_original_shard(s).map_err(codec)?;
        }
        let out = rs.encode().map_err(codec)?;
        shards.extend(out.recovery_iter().map(|r| {
            let mut s = Vec::with_capacity(len + 4);
            s.extend_from_slice(r);
            s
        }));
        Ok(shards
            .into_iter()
            .map(|mut s| {
                let crc = crc32c::crc32c(&s);
                s.extend_from_slice(&crc.to_le_bytes());
                Bytes::from(s)
            })
            .collect())
    }
}

/// Whether a shard (with its CRC32C trailer) of stripe `j` is intact.
pub fn verified<'a>(geo: &Geometry, j: u64, shard: &'a [u8]) -> Option<&'a [u8]> {
    let len = geo.shard_len(j) as usize;
    if shard.len() != len + 4 {
        return None;
    }
    let (body, crc) = shard.split_at(len);
    let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    (crc32c::crc32c(body) == want).then_some(body)
}

/// Stripe `j`'s bytes from its shards (index `i` of `shards` is fragment `i`'s shard with
/// CRC, `None` when missing). Shards failing their CRC are erasures; fewer than `k` good ones
/// is an error, never guessed bytes. Returns the bytes and how many shards were corrupt.
/// CPU-bound when parity is needed: call it off the async threads.
pub fn decode(
    geo: &Geometry,
    j: u64,
    shards: &[Option<Bytes>],
) -> Result<(Bytes, usize), CodecError> {
    let (k, m) = (usize::from(geo.k), usize::from(geo.m));
    let len = geo.shard_len(j) as usize;
    let want = geo.stripe_len(j) as usize;
    let mut good: Vec<Option<&[u8]>> = vec![None; k + m];
    let mut corrupt = 0;
    for (i, s) in shards.iter().enumerate().take(k + m) {
        if let Some(s) = s {
            match verified(geo, j, s) {
                Some(b) => good[i] = Some(b),
                None => corrupt += 1,
            }
        }
    }
    let n = good.iter().flatten().count();
    if n < k {
        return Err(CodecError::TooFewShards {
            stripe: j,
            good: n,
            k,
        });
    }
    let mut out = BytesMut::with_capacity(k * len);
    if good[..k].iter().all(Option::is_some) {
        for b in good[..k].iter().flatten() {
            out.put_slice(b);
        }
    } else {
        let codec = |e: reed_solomon_simd::Error| CodecError::Bad(e.to_string());
        let mut rs = ReedSolomonDecoder::new(k, m, len).map_err(codec)?;
        for (i, b) in good.iter().enumerate() {
            match b {
                Some(b) if i < k => rs.add_original_shard(i, b).map_err(codec)?,
                Some(b) => rs.add_recovery_shard(i - k, b).map_err(codec)?,
                None => {}
            }
        }
        let restored = rs.decode().map_err(codec)?;
        for (i, b) in good[..k].iter().enumerate() {
            match b {
                Some(b) => out.put_slice(b),
                None => out.put_slice(
                    restored
                        .restored_original(i)
                        .ok_or_else(|| CodecError::Bad(format!("shard {i} not restored")))?,
                ),
            }
        }
    }
    out.truncate(want);
    Ok((out.freeze(), corrupt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geo(k: u8, m: u8, stripe: u32, size: u64) -> Geometry {
        Geometry {
            k,
            m,
            stripe_bytes: stripe,
            size,
        }
    }

    #[test]
    fn a_header_round_trips_and_a_flipped_bit_is_refused() {
        let g = geo(4, 2, 1 << 20, 12_345_678);
        let h = header(&g, 5, &[7; 16]);
        assert_eq!(h.len(), HEADER_LEN);
        assert_eq!(parse_header(&h).unwrap(), (g, 5, [7; 16]));
        let mut bad = h.to_vec();
        bad[17] ^= 1;
        assert!(parse_header(&bad).is_err());
    }

    #[test]
    fn fragment_offsets_cover_every_stripe_back_to_back() {
        let g = geo(4, 2, 1000, 2500);
        assert_eq!(g.stripes(), 3);
        assert_eq!((g.shard_len(0), g.shard_len(2)), (250, 126));
        assert_eq!(g.shard_offset(2), 64 + 2 * 254);
        assert_eq!(g.fragment_len(), 64 + 2 * 254 + 130);
        assert_eq!(geo(4, 2, 1000, 0).fragment_len(), 64);
    }

    #[test]
    fn more_than_m_corrupt_shards_is_an_error_not_wrong_bytes() {
        let g = geo(4, 2, 4096, 4000);
        let data: Vec<u8> = (0..4000u32).map(|i| (i * 7) as u8).collect();
        let shards = Encoder::new(g).encode(0, &data).unwrap();
        let mut some: Vec<Option<Bytes>> = shards.into_iter().map(Some).collect();
        let mut flip = |i: usize| {
            let mut v = some[i].take().unwrap().to_vec();
            v[3] ^= 0x40;
            some[i] = Some(Bytes::from(v));
        };
        flip(0);
        flip(5);
        let (back, corrupt) = decode(&g, 0, &some).unwrap();
        assert_eq!((&back[..], corrupt), (&data[..], 2));
        some[2] = None;
        assert!(matches!(
            decode(&g, 0, &some),
            Err(CodecError::TooFewShards { good: 3, .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn any_k_shards_rebuild_every_stripe(
            k in 1u8..=8, m in 1u8..=4, stripe in 64u32..5000, size in 0u64..20_000,
            lost in proptest::collection::vec(0usize..12, 0..4), seed in any::<u8>(),
        ) {
            let g = geo(k, m, stripe, size);
            let data: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let mut enc = Encoder::new(g);
            let mut back = Vec::new();
            for j in 0..g.stripes() {
                let lo = (j * u64::from(stripe)) as usize;
                let part = &data[lo..lo + g.stripe_len(j) as usize];
                let shards = enc.encode(j, part).unwrap();
                prop_assert!(shards.iter().all(|s| s.len() as u64 == g.shard_len(j) + 4));
                let mut some: Vec<Option<Bytes>> = shards.into_iter().map(Some).collect();
                for &l in lost.iter().filter(|&&l| l < g.width()).take(usize::from(m)) {
                    some[l] = None;
                }
                back.extend_from_slice(&decode(&g, j, &some).unwrap().0);
            }
            prop_assert_eq!(back, data);
        }
    }
}
