//! Running checksums of the algorithms S3 names in `x-amz-checksum-*` headers and trailers:
//! the aws-chunked decoder checks a trailer's, write-back a staged PUT's header before its ack.

use base64::Engine;
use sha2::Digest;

/// A running checksum of one of the algorithms S3 accepts in a trailer.
pub enum Checksum {
    /// CRC-32 (ISO-HDLC).
    Crc32(crc32fast::Hasher),
    /// CRC-32C (Castagnoli).
    Crc32c(u32),
    /// CRC-64/NVME.
    Crc64Nvme(crc64fast_nvme::Digest),
    /// SHA-1.
    Sha1(sha1::Sha1),
    /// SHA-256.
    Sha256(sha2::Sha256),
}

impl Checksum {
    /// A checksum for a trailer header name such as `x-amz-checksum-crc32`.
    pub fn for_header(name: &str) -> Option<Self> {
        Some(match name.strip_prefix("x-amz-checksum-")? {
            "crc32" => Self::Crc32(crc32fast::Hasher::new()),
            "crc32c" => Self::Crc32c(0),
            "crc64nvme" => Self::Crc64Nvme(crc64fast_nvme::Digest::new()),
            "sha1" => Self::Sha1(sha1::Sha1::new()),
            "sha256" => Self::Sha256(sha2::Sha256::new()),
            _ => return None,
        })
    }

    /// Feeds data.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Crc32(h) => h.update(data),
            Self::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            Self::Crc64Nvme(d) => d.write(data),
            Self::Sha1(h) => h.update(data),
            Self::Sha256(h) => h.update(data),
        }
    }

    /// The base64 of the big-endian digest, as the trailer carries it.
    pub fn finish_base64(self) -> String {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        match self {
            Self::Crc32(h) => b64(&h.finalize().to_be_bytes()),
            Self::Crc32c(c) => b64(&c.to_be_bytes()),
            Self::Crc64Nvme(d) => b64(&d.sum64().to_be_bytes()),
            Self::Sha1(h) => b64(&h.finalize()),
            Self::Sha256(h) => b64(&h.finalize()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(name: &str, data: &[u8]) -> String {
        let mut c = Checksum::for_header(name).unwrap();
        c.update(&data[..3]);
        c.update(&data[3..]);
        c.finish_base64()
    }

    #[test]
    fn known_values() {
        // Standard check values of "123456789" for each algorithm, base64 of big-endian.
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        assert_eq!(
            of("x-amz-checksum-crc32", b"123456789"),
            b64(&0xCBF4_3926u32.to_be_bytes())
        );
        assert_eq!(
            of("x-amz-checksum-crc32c", b"123456789"),
            b64(&0xE306_9283u32.to_be_bytes())
        );
        assert_eq!(
            of("x-amz-checksum-crc64nvme", b"123456789"),
            b64(&0xAE8B_1486_0A79_9888u64.to_be_bytes())
        );
        assert_eq!(
            of("x-amz-checksum-sha256", b"abc"),
            "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
        );
        assert!(Checksum::for_header("x-amz-checksum-md5").is_none());
    }
}
