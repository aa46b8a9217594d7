//! UploadPartCopy into an upload Floe handed out: the origin does not know the upload, so the
//! stage reads the source's range from the origin itself and stages it as the part (S3A and
//! the AWS CLI copy large objects this way, e.g. a rename).

use async_trait::async_trait;
use bytes::Bytes;
use floe_core::copy_source::CopySource;
use floe_core::{xml_escape, ByteStream, ETag, ObjectHead, OriginError, S3Error, S3ErrorCode};
use floe_filter::FilterCtx;
use pingora::proxy::Session;

use crate::filter::WritebackFilter;
use crate::propagate::origin_of;
use crate::session_body::header;
use crate::stage::{BodySource, Object};
use crate::upload::{answer, part_number};

/// The largest part S3 copies (5 GiB).
const MAX_PART: u64 = 5 << 30;

impl WritebackFilter {
    /// Stages bytes of the copy source as part `partNumber` of upload `id`.
    pub(crate) async fn upload_part_copy(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
        id: &str,
    ) -> Result<bool, S3Error> {
        let Some(opts) = self.opts else {
            return Ok(false);
        };
        self.node.learn_upload(id, key).await?;
        let n = part_number(session)?;
        let source = CopySource::parse(header(session, "x-amz-copy-source").unwrap_or(""))?;
        // The proxy allows another bucket only on this route's origin: this reader reads it.
        let origin = origin_of(&self.origins, &self.bucket)
            .ok_or_else(|| S3Error::internal("no origin for the route"))?;
        let head = source_head(&*origin, &source).await?;
        check_source_conditions(session, &head)?;
        let (first, last) = source_range(header(session, "x-amz-copy-source-range"), head.size)?;
        let len = if head.size == 0 { 0 } else { last + 1 - first };
        let plan = self.part_plan(&opts, len)?;
        let bytes: Box<dyn ByteStream> = match (len, source.version.as_deref()) {
            (0, _) => Box::new(Nothing),
            (_, Some(v)) if v != "null" => origin
                .get_version_range(&source.bucket, &source.key, v, &head.etag, (first, last))
                .await
                .map_err(unreadable)?,
            _ => origin
                .get_range(&source.bucket, &source.key, &head.etag, first, last)
                .await
                .map_err(unreadable)?,
        };
        let obj = Object {
            bucket: &self.bucket,
            key,
            headers: Vec::new(),
            expected: crate::digests::Expected::default(),
            parts: Vec::new(),
        };
        let mut body = FromOrigin(bytes);
        let record = self
            .node
            .coordinator()
            .stage_part(plan, obj, &mut body, &mut ctx.phases)
            .await?;
        let etag = self.keep_part(id, n, record).await?;
        let modified = httpdate::fmt_http_date(std::time::SystemTime::now());
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CopyPartResult><LastModified>{}</LastModified><ETag>{}</ETag></CopyPartResult>",
            xml_escape(&modified),
            xml_escape(&etag)
        );
        answer(
            session,
            ctx,
            200,
            &[("x-floe-writeback", "staged".into())],
            body,
        )
        .await
    }
}

/// The version the copy reads.
async fn source_head(
    origin: &dyn floe_core::OriginReader,
    source: &CopySource,
) -> Result<ObjectHead, S3Error> {
    let head = match source.version.as_deref() {
        Some(v) if v != "null" => origin.head_version(&source.bucket, &source.key, v).await,
        _ => origin.head(&source.bucket, &source.key, None).await,
    };
    match head {
        Ok(Some(h)) => Ok(h),
        Ok(None) | Err(OriginError::NotFound) => Err(S3Error::new(
            S3ErrorCode::NoSuchKey,
            "The specified key does not exist.",
        )),
        Err(e) => Err(unreadable(e)),
    }
}

/// `x-amz-copy-source-if-match` / `-if-none-match` against the source's ETag.
fn check_source_conditions(session: &Session, head: &ObjectHead) -> Result<(), S3Error> {
    let same = |v: &str| {
        v.split(',')
            .any(|e| e.trim() == "*" || ETag::parse(e.trim()).is_ok_and(|e| e == head.etag))
    };
    let if_match = header(session, "x-amz-copy-source-if-match");
    let if_none = header(session, "x-amz-copy-source-if-none-match");
    if if_match.is_some_and(|v| !same(v)) || if_none.is_some_and(same) {
        return Err(S3Error::precondition_failed());
    }
    Ok(())
}

/// `bytes=first-last` of a source of `size` bytes (none: the whole source).
fn source_range(range: Option<&str>, size: u64) -> Result<(u64, u64), S3Error> {
    let invalid = || {
        S3Error::new(
            S3ErrorCode::InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let (first, last) = match range {
        None => (0, size.saturating_sub(1)),
        Some(r) => {
            let (a, b) = r
                .strip_prefix("bytes=")
                .and_then(|r| r.split_once('-'))
                .ok_or_else(invalid)?;
            let first: u64 = a.parse().map_err(|_| invalid())?;
            let last: u64 = b.parse().map_err(|_| invalid())?;
            if first > last || last >= size {
                return Err(S3Error::new(
                    S3ErrorCode::InvalidRange,
                    "The requested range is not satisfiable",
                ));
            }
            (first, last)
        }
    };
    if size > 0 && last + 1 - first > MAX_PART {
        return Err(S3Error::new(
            S3ErrorCode::InvalidRequest,
            "The specified copy source is larger than the maximum allowable size for a copy source: 5368709120",
        ));
    }
    Ok((first, last))
}

fn unreadable(e: OriginError) -> S3Error {
    S3Error::new(
        S3ErrorCode::SlowDown,
        "The copy source could not be read from the origin; retry.",
    )
    .caused_by(e)
}

/// The origin's bytes as a stage's body.
struct FromOrigin(Box<dyn ByteStream>);

#[async_trait]
impl BodySource for FromOrigin {
    async fn next(&mut self) -> Result<Option<Bytes>, S3Error> {
        self.0.next().await.map_err(unreadable)
    }
}

/// An empty source.
struct Nothing;

#[async_trait]
impl ByteStream for Nothing {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_range_is_read_as_s3_reads_it() {
        assert_eq!(source_range(None, 10).unwrap(), (0, 9));
        assert_eq!(source_range(Some("bytes=2-5"), 10).unwrap(), (2, 5));
        for bad in ["2-5", "bytes=5-2", "bytes=a-3", "bytes=-3"] {
            assert!(source_range(Some(bad), 10).is_err(), "{bad}");
        }
        assert_eq!(
            source_range(Some("bytes=0-10"), 10).unwrap_err().code,
            S3ErrorCode::InvalidRange
        );
    }
}
