//! The source a copy names (`x-amz-copy-source` of CopyObject and UploadPartCopy): a bucket, a
//! key and perhaps a version, as S3 reads the header: `[/]bucket/key[?versionId=id]`, the
//! path percent-encoded, the `?` that starts the version literal.

use crate::uri::decode_strict;
use crate::{BucketName, ObjectKey, S3Error, S3ErrorCode};

/// What a copy reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// The source bucket.
    pub bucket: BucketName,
    /// The source key (decoded).
    pub key: ObjectKey,
    /// The version named (`versionId=`), if any; `null` names the unversioned object.
    pub version: Option<String>,
}

impl CopySource {
    /// Parses the header's value; a source without bucket and key, or one S3 could never
    /// name, is S3's InvalidArgument.
    pub fn parse(header: &str) -> Result<Self, S3Error> {
        let (path, query) = match header.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (header, None),
        };
        let path = decode_strict(path).ok_or_else(invalid)?;
        let path = path.strip_prefix('/').unwrap_or(&path);
        let (bucket, key) = path.split_once('/').ok_or_else(invalid)?;
        let bucket = BucketName::parse(bucket).map_err(|_| invalid())?;
        let key = ObjectKey::parse(key).map_err(|_| invalid())?;
        let version = match query {
            None => None,
            Some(q) => {
                let id = q.strip_prefix("versionId=").ok_or_else(invalid)?;
                let id = decode_strict(id).filter(|v| !v.is_empty());
                Some(id.ok_or_else(invalid)?)
            }
        };
        Ok(Self {
            bucket,
            key,
            version,
        })
    }

    /// Whether the copy reads the current object (no version, or `null`): the one a staged
    /// write may be newer than.
    pub fn reads_current(&self) -> bool {
        self.version.as_deref().is_none_or(|v| v == "null")
    }
}

fn invalid() -> S3Error {
    S3Error::new(
        S3ErrorCode::InvalidArgument,
        "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> CopySource {
        CopySource::parse(s).unwrap()
    }

    #[test]
    fn reads_bucket_key_and_version_as_s3_does() {
        let plain = parse("/src-bucket/a/b.parquet");
        assert_eq!(plain.bucket.as_str(), "src-bucket");
        assert_eq!(plain.key.as_str(), "a/b.parquet");
        assert!(plain.version.is_none() && plain.reads_current());
        let versioned = parse("src-bucket/a%20b%3Fc?versionId=3%2Fx");
        assert_eq!(versioned.key.as_str(), "a b?c");
        assert_eq!(versioned.version.as_deref(), Some("3/x"));
        assert!(!versioned.reads_current());
        assert!(parse("b-1/k?versionId=null").reads_current());
    }

    #[test]
    fn refuses_what_names_no_object() {
        let bad = [
            "",
            "/",
            "bucket",
            "bucket/",
            "/Bad_Bucket/k",
            "b-1/k?other=1",
            "b-1/k?versionId=",
            "b-1/%ff",
        ];
        for source in bad {
            let e = CopySource::parse(source).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::InvalidArgument, "{source:?}");
        }
    }
}
