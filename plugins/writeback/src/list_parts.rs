//! ListParts of an upload Floe staged: the parts kept so far, in part-number order, paged by
//! `part-number-marker` and `max-parts` as S3 pages them.

use floe_core::{xml_escape, S3Error, S3ErrorCode};
use floe_filter::FilterCtx;
use pingora::proxy::Session;

use crate::filter::WritebackFilter;
use crate::journal::Record;
use crate::upload::query;

/// Parts in one answer unless `max-parts` asks for fewer (S3's ceiling).
const MAX_PARTS: usize = 1000;

/// RFC 3339 of a moment in Unix milliseconds (S3's LastModified form).
pub(crate) fn rfc3339(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The ListPartsResult document for `parts` (number, record), all of the upload's, sorted.
pub fn render(
    bucket: &str,
    key: &str,
    id: &str,
    parts: &[(u32, &Record)],
    marker: u32,
    max: usize,
) -> String {
    let after: Vec<&(u32, &Record)> = parts.iter().filter(|(n, _)| *n > marker).collect();
    let page = &after[..after.len().min(max)];
    let truncated = after.len() > page.len();
    let next = page.last().map_or(marker, |(n, _)| *n);
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListPartsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>{}</Bucket><Key>{}</Key><UploadId>{}</UploadId><PartNumberMarker>{marker}</PartNumberMarker><NextPartNumberMarker>{next}</NextPartNumberMarker><MaxParts>{max}</MaxParts><IsTruncated>{truncated}</IsTruncated>",
        xml_escape(bucket),
        xml_escape(key),
        xml_escape(id)
    );
    for (n, r) in page {
        out += &format!(
            "<Part><PartNumber>{n}</PartNumber><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size></Part>",
            rfc3339(r.acked_ms),
            xml_escape(&r.etag),
            r.geometry.size
        );
    }
    out + "<StorageClass>STANDARD</StorageClass></ListPartsResult>"
}

fn number(session: &Session, name: &str, default: usize) -> Result<usize, S3Error> {
    match query(session, name) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| {
            S3Error::new(
                S3ErrorCode::InvalidArgument,
                format!("{name} must be a non-negative integer"),
            )
        }),
    }
}

impl WritebackFilter {
    /// ListParts of upload `id` of `key`.
    pub(crate) async fn list_parts(
        &self,
        session: &mut Session,
        ctx: &mut FilterCtx,
        key: &str,
        id: &str,
    ) -> Result<bool, S3Error> {
        let marker = u32::try_from(number(session, "part-number-marker", 0)?).unwrap_or(u32::MAX);
        let max = number(session, "max-parts", MAX_PARTS)?.min(MAX_PARTS);
        let up = self.node.upload_view(id, key).await?;
        let refs: Vec<(u32, &Record)> = up.parts.iter().map(|(n, r)| (*n, &**r)).collect();
        let body = render(&self.bucket, key, id, &refs, marker, max);
        crate::upload::answer(session, ctx, 200, &[], body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(size: u64, etag: &str) -> Record {
        crate::journal::sample("k", size, etag, 1_764_547_200_000)
    }

    #[test]
    fn parts_are_listed_in_order_and_paged_after_the_marker() {
        let (a, b, c) = (part(5, "\"a\""), part(6, "\"b\""), part(7, "\"c\""));
        let parts = [(1, &a), (2, &b), (5, &c)];
        let all = render("b", "k&", "floe-wb-1", &parts, 0, 1000);
        assert!(all.contains("<Key>k&amp;</Key>"));
        assert!(all.contains("<IsTruncated>false</IsTruncated>"));
        let one = all.find("<PartNumber>1</PartNumber>").unwrap();
        let five = all.find("<PartNumber>5</PartNumber>").unwrap();
        assert!(one < five && all.contains("<ETag>&quot;c&quot;</ETag><Size>7</Size>"));
        assert!(all.contains("<LastModified>2025-12-01T00:00:00Z</LastModified>"));
        let page = render("b", "k", "floe-wb-1", &parts, 1, 1);
        assert!(
            page.contains("<PartNumber>2</PartNumber>")
                && !page.contains("<PartNumber>5</PartNumber>")
        );
        assert!(
            page.contains("<IsTruncated>true</IsTruncated><")
                || page.contains("<IsTruncated>true</IsTruncated>")
        );
        assert!(page.contains("<NextPartNumberMarker>2</NextPartNumberMarker>"));
    }
}
