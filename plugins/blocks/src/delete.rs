//! DeleteObjects: the keys a request deletes, read from its XML body as it streams to the
//! origin, so exactly those mappings (in memory and persisted) and their blocks are dropped.

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// The largest DeleteObjects body read for keys: S3 allows 1,000 keys of up to 1,024 bytes
/// each, which with the XML around them stays under this.
pub const MAX_DELETE_BODY: usize = 2 << 20;

/// The keys of a DeleteObjects body, parsed once at its end.
#[derive(Clone)]
pub(crate) struct DeleteKeys(pub(crate) Vec<String>);

/// The body of one DeleteObjects request, collected in [`floe_filter::FilterCtx::ext`] and held
/// back from the origin until its keys are read.
#[derive(Default, Clone)]
pub(crate) struct DeleteBody {
    buf: BytesMut,
}

impl DeleteBody {
    /// Adds one piece of the body; `false`: the body outgrew [`MAX_DELETE_BODY`].
    pub(crate) fn push(&mut self, piece: &Bytes) -> bool {
        if self.buf.len() + piece.len() > MAX_DELETE_BODY {
            return false;
        }
        self.buf.extend_from_slice(piece);
        true
    }

    /// The keys named, or `None` when the body is not S3's XML.
    pub(crate) fn keys(&self) -> Option<Vec<String>> {
        parse_keys(&self.buf)
    }

    /// The body collected so far, leaving none.
    pub(crate) fn take(&mut self) -> Bytes {
        std::mem::take(&mut self.buf).freeze()
    }
}

#[derive(Deserialize)]
struct Delete {
    #[serde(rename = "Object", default)]
    objects: Vec<Object>,
}

#[derive(Deserialize)]
struct Object {
    #[serde(rename = "Key")]
    key: String,
}

/// The `<Key>`s of a DeleteObjects request body (entities decoded), or `None` if it is not one.
pub fn parse_keys(body: &[u8]) -> Option<Vec<String>> {
    let text = std::str::from_utf8(body).ok()?;
    let doc: Delete = quick_xml::de::from_str(text).ok()?;
    Some(doc.objects.into_iter().map(|o| o.key).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keys_with_entities_and_ignores_the_rest() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>
<Object><Key>t/data/a.parquet</Key></Object>
<Object><Key>odd &amp; &lt;name&gt;</Key><VersionId>v1</VersionId></Object>
</Delete>"#;
        assert_eq!(
            parse_keys(body),
            Some(vec![
                "t/data/a.parquet".to_owned(),
                "odd & <name>".to_owned()
            ])
        );
        assert_eq!(parse_keys(b"<Delete></Delete>"), Some(vec![]));
        assert_eq!(parse_keys(b"a;chunk-signature=00\r\n<Delete>"), None);
        assert_eq!(parse_keys(&[0xff, 0xfe]), None);
    }

    #[test]
    fn an_oversized_body_is_refused() {
        let mut b = DeleteBody::default();
        assert!(b.push(&Bytes::from_static(
            b"<Delete><Object><Key>k</Key></Object>",
        )));
        assert!(b.push(&Bytes::from_static(b"</Delete>")));
        assert_eq!(b.keys(), Some(vec!["k".to_owned()]));
        assert!(!b.push(&Bytes::from(vec![b' '; MAX_DELETE_BODY])));
        assert_eq!(b.take().len(), 46);
    }

    #[test]
    fn bodies_a_lenient_origin_reads_otherwise_are_refused() {
        // Each is taken by MinIO (Go's encoding/xml) one way or another: Floe refuses them
        // rather than guess which keys go.
        let dup = b"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>";
        assert_eq!(parse_keys(dup), None);
        let lead = b"junk<Delete><Object><Key>a</Key></Object></Delete>";
        assert_eq!(parse_keys(lead), None);
    }

    #[test]
    fn keys_keep_their_spaces() {
        let body =
            b"<Delete><Object><Key> a b </Key></Object><Object><Key>\tt\n</Key></Object></Delete>";
        assert_eq!(
            parse_keys(body),
            Some(vec![" a b ".to_owned(), "\tt\n".to_owned()])
        );
    }
}
