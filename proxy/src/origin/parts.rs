//! Multipart uploads to the origin: write-back propagates a write a client completed from parts
//! as the same parts (create, one UploadPart each with its `Content-MD5`, complete), so the
//! origin's ETag is the one Floe answered the client, S3's `"<md5 of the part md5s>-N"`. An
//! upload that fails on the way is aborted.

use base64::Engine;
use bytes::Bytes;
use floe_core::{BucketName, ByteStream, ETag, ObjectKey, OriginError, PartSpan};

use crate::origin::reader::PingoraOriginReader;

/// Largest answer read from a create or complete call (they are a few hundred bytes).
const MAX_ANSWER: usize = 64 << 10;

impl PingoraOriginReader {
    /// [`floe_core::OriginReader::put_parts`] over this origin.
    pub(crate) async fn upload_parts(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        headers: &[(String, String)],
        parts: &[PartSpan],
        mut body: Box<dyn ByteStream>,
    ) -> Result<ETag, OriginError> {
        let mut create: Vec<(&str, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        create.push(("content-length", "0".into()));
        let (status, answer) = self
            .exchange(bucket, (key, "uploads"), "POST", &create, None)
            .await?;
        let upload_id = match status {
            200 => element(&answer, "UploadId").ok_or_else(|| {
                OriginError::Transport("CreateMultipartUpload without an UploadId".into())
            })?,
            404 => return Err(OriginError::NotFound),
            s => return Err(OriginError::Status(s)),
        };
        let id_query = format!("uploadId={}", floe_core::uri::uri_encode(&upload_id, true));
        let outcome = self
            .send_parts(bucket, key, &id_query, parts, body.as_mut())
            .await;
        if outcome.is_err() {
            // Best effort: the origin's lifecycle rules reap an upload this cannot reach.
            let _ = self
                .exchange(bucket, (key, &id_query), "DELETE", &[], None)
                .await;
        }
        outcome
    }

    /// Every part, then the complete call; returns the object's ETag.
    async fn send_parts(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        id_query: &str,
        parts: &[PartSpan],
        body: &mut dyn ByteStream,
    ) -> Result<ETag, OriginError> {
        let mut carry = Bytes::new();
        let mut listed = String::from("<CompleteMultipartUpload>");
        for (i, part) in parts.iter().enumerate() {
            let number = i + 1;
            let extra = [
                ("content-length", part.len.to_string()),
                (
                    "content-md5",
                    base64::engine::general_purpose::STANDARD.encode(part.md5),
                ),
            ];
            let query = format!("partNumber={number}&{id_query}");
            let mut piece = Take {
                body: &mut *body,
                carry: &mut carry,
                left: part.len,
            };
            let (status, answer_etag) = {
                let (session, peer, _permit, status) = self
                    .send_body(bucket, (key, &query), "PUT", &extra, Some(&mut piece))
                    .await?;
                let etag = crate::origin::reader::header(&session, "etag");
                let (session, _) = drain(session).await?;
                self.release(session, &peer).await;
                (status, etag)
            };
            if status != 200 {
                return Err(OriginError::Status(status));
            }
            let etag = answer_etag.unwrap_or_else(|| format!("\"{}\"", hex::encode(part.md5)));
            listed.push_str(&format!(
                "<Part><PartNumber>{number}</PartNumber><ETag>{}</ETag></Part>",
                floe_core::xml_escape(&etag)
            ));
        }
        if !carry.is_empty() || body.next().await?.is_some() {
            return Err(OriginError::Transport("write longer than its parts".into()));
        }
        listed.push_str("</CompleteMultipartUpload>");
        let doc = Bytes::from(listed);
        let extra = [("content-length", doc.len().to_string())];
        let (status, answer) = self
            .exchange(bucket, (key, id_query), "POST", &extra, Some(doc))
            .await?;
        // A complete call can fail after its 200: the error is then the answer's body.
        if status != 200 || answer.contains("<Error>") {
            return Err(OriginError::Transport(format!(
                "CompleteMultipartUpload answered {status}: {}",
                element(&answer, "Code").unwrap_or_default()
            )));
        }
        element(&answer, "ETag")
            .and_then(|e| ETag::parse(&e).ok())
            .ok_or_else(|| OriginError::Transport("CompleteMultipartUpload without an ETag".into()))
    }

    /// One call with a small body (or none) whose answer is read whole.
    async fn exchange(
        &self,
        bucket: &BucketName,
        (key, query): (&ObjectKey, &str),
        method: &str,
        extra: &[(&str, String)],
        body: Option<Bytes>,
    ) -> Result<(u16, String), OriginError> {
        let mut doc = body.map(|b| Pieces(vec![b].into_iter()));
        let sent = doc.as_mut().map(|d| d as &mut dyn ByteStream);
        let (session, peer, _permit, status) = self
            .send_body(bucket, (key, query), method, extra, sent)
            .await?;
        let (session, answer) = drain(session).await?;
        self.release(session, &peer).await;
        Ok((status, String::from_utf8_lossy(&answer).into_owned()))
    }
}

/// Reads an answer's body whole (bounded).
async fn drain(
    mut session: pingora::protocols::http::client::HttpSession,
) -> Result<(pingora::protocols::http::client::HttpSession, Vec<u8>), OriginError> {
    let mut answer = Vec::new();
    while let Some(b) = session
        .read_response_body()
        .await
        .map_err(|e| OriginError::Transport(e.to_string()))?
    {
        answer.extend_from_slice(&b);
        if answer.len() > MAX_ANSWER {
            return Err(OriginError::Transport("origin answer too large".into()));
        }
    }
    Ok((session, answer))
}

/// The next `left` bytes of a write's body, as one part's body; what a piece holds past the
/// part stays in `carry` for the next.
struct Take<'a> {
    body: &'a mut dyn ByteStream,
    carry: &'a mut Bytes,
    left: u64,
}

#[async_trait::async_trait]
impl ByteStream for Take<'_> {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        if self.left == 0 {
            return Ok(None);
        }
        if self.carry.is_empty() {
            *self.carry =
                self.body.next().await?.ok_or_else(|| {
                    OriginError::Transport("write ended before its last part".into())
                })?;
        }
        let take = self
            .carry
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        self.left -= take as u64;
        Ok(Some(self.carry.split_to(take)))
    }
}

/// The text of the first `<tag>` element of `xml`, with XML's entities resolved.
pub(crate) fn element(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(floe_core::xml_unescape(&xml[start..end]))
}

/// A part's bytes as a stream.
pub(crate) struct Pieces(pub(crate) std::vec::IntoIter<Bytes>);

#[async_trait::async_trait]
impl ByteStream for Pieces {
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        Ok(self.0.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answers_fields_are_read_with_their_entities_resolved() {
        let xml = "<?xml version=\"1.0\"?><CompleteMultipartUploadResult><Bucket>b</Bucket>\
                   <ETag>&#34;0a1b-2&#34;</ETag></CompleteMultipartUploadResult>";
        assert_eq!(element(xml, "ETag").as_deref(), Some("\"0a1b-2\""));
        assert_eq!(element(xml, "Bucket").as_deref(), Some("b"));
        assert_eq!(element(xml, "UploadId"), None);
        let id = "<InitiateMultipartUploadResult><UploadId>a&amp;b</UploadId></InitiateMultipartUploadResult>";
        assert_eq!(element(id, "UploadId").as_deref(), Some("a&b"));
    }
}
