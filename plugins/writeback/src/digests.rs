//! The integrity headers a client sends with a PUT (`Content-MD5`, one `x-amz-checksum-*`),
//! checked against the body before the write is acknowledged, as S3 checks them: a staged
//! write is answered by Floe, not by the origin, so nobody else would before the 200.

use base64::Engine;
use floe_core::checksum::Checksum;
use floe_core::{S3Error, S3ErrorCode};

/// What the client said its body hashes to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The MD5 of `Content-MD5`.
    md5: Option<[u8; 16]>,
    /// An `x-amz-checksum-*` header: its name and base64 value.
    checksum: Option<(String, String)>,
}

impl Expected {
    /// Reads the integrity headers among `headers` (lower-case names). A `Content-MD5` that is
    /// not the base64 of 16 bytes is InvalidDigest; two checksum headers are InvalidRequest;
    /// a checksum value that is not base64 is InvalidRequest (S3's own answers).
    pub fn from_headers<'a>(
        headers: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, S3Error> {
        let mut expected = Self::default();
        for (name, value) in headers {
            if name == "content-md5" {
                expected.md5 = Some(md5_of(value)?);
            } else if Checksum::for_header(name).is_some() {
                if expected.checksum.is_some() {
                    return Err(S3Error::new(
                        S3ErrorCode::InvalidRequest,
                        "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
                    ));
                }
                if decode(value).is_none() {
                    return Err(S3Error::new(
                        S3ErrorCode::InvalidRequest,
                        format!("Value for {name} header is invalid."),
                    ));
                }
                expected.checksum = Some((name.to_owned(), value.trim().to_owned()));
            }
        }
        Ok(expected)
    }

    /// A running checksum for the `x-amz-checksum-*` header, if one was sent.
    pub fn checksum(&self) -> Option<Checksum> {
        self.checksum
            .as_ref()
            .and_then(|(name, _)| Checksum::for_header(name))
    }

    /// Checks the body's quoted hex MD5 ETag and the checksum computed over it; BadDigest
    /// names which did not match.
    pub fn verify(&self, etag: &str, computed: Option<&str>) -> Result<(), S3Error> {
        if let Some(md5) = &self.md5 {
            if hex::decode(etag.trim_matches('"')).ok().as_deref() != Some(&md5[..]) {
                return Err(S3Error::new(
                    S3ErrorCode::BadDigest,
                    "The Content-MD5 you specified did not match what we received.",
                ));
            }
        }
        if let Some((name, value)) = &self.checksum {
            if computed != Some(value.as_str()) {
                let algorithm = name.trim_start_matches("x-amz-checksum-").to_uppercase();
                return Err(S3Error::new(
                    S3ErrorCode::BadDigest,
                    format!("The {algorithm} you specified did not match the calculated checksum."),
                ));
            }
        }
        Ok(())
    }
}

fn decode(value: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()
}

fn md5_of(value: &str) -> Result<[u8; 16], S3Error> {
    decode(value)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidDigest,
                "The Content-MD5 you specified was invalid.",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // md5("hello world") and its base64; crc32("hello world") = 0x0d4a1185.
    const ETAG: &str = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"";
    const MD5_B64: &str = "XrY7u+Ae7tCTyyK7j1rNww==";

    fn expected(headers: &[(&str, &str)]) -> Result<Expected, S3Error> {
        Expected::from_headers(headers.iter().copied())
    }

    #[test]
    fn a_matching_content_md5_passes_and_another_is_bad_digest() {
        let ok = expected(&[("content-md5", MD5_B64)]).map(|e| e.verify(ETAG, None));
        assert!(matches!(ok, Ok(Ok(()))));
        let other = "\"00000000000000000000000000000000\"";
        let bad = expected(&[("content-md5", MD5_B64)]).and_then(|e| e.verify(other, None));
        assert_eq!(bad.err().map(|e| e.code), Some(S3ErrorCode::BadDigest));
    }

    #[test]
    fn a_content_md5_that_is_not_sixteen_bytes_of_base64_is_invalid_digest() {
        for value in ["not base64!", "AAAA", ""] {
            let got = expected(&[("content-md5", value)]).err().map(|e| e.code);
            assert_eq!(got, Some(S3ErrorCode::InvalidDigest), "{value:?}");
        }
    }

    #[test]
    fn a_checksum_header_is_computed_and_compared() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(0x0d4a_1185u32.to_be_bytes());
        let e = expected(&[("x-amz-checksum-crc32", &b64)]).ok();
        let mut running = e.as_ref().and_then(Expected::checksum);
        if let Some(c) = running.as_mut() {
            c.update(b"hello world");
        }
        let computed = running.map(Checksum::finish_base64);
        assert_eq!(computed.as_deref(), Some(b64.as_str()));
        let verdict = e.as_ref().map(|e| e.verify(ETAG, computed.as_deref()));
        assert!(matches!(verdict, Some(Ok(()))));
        let wrong = e.as_ref().map(|e| e.verify(ETAG, Some("AAAAAA==")));
        assert_eq!(
            wrong.and_then(|r| r.err()).map(|e| e.code),
            Some(S3ErrorCode::BadDigest)
        );
    }

    #[test]
    fn two_checksum_headers_or_a_value_not_base64_are_refused_and_other_names_ignored() {
        let two = expected(&[
            ("x-amz-checksum-crc32", "AAAAAA=="),
            ("x-amz-checksum-sha1", "AAAAAA=="),
        ]);
        assert_eq!(two.err().map(|e| e.code), Some(S3ErrorCode::InvalidRequest));
        let junk = expected(&[("x-amz-checksum-crc32c", "%%%")]);
        assert_eq!(
            junk.err().map(|e| e.code),
            Some(S3ErrorCode::InvalidRequest)
        );
        let none = expected(&[
            ("x-amz-checksum-algorithm", "CRC32"),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ]);
        assert_eq!(none.ok(), Some(Expected::default()));
    }
}
