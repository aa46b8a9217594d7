//! DeleteObjects: the keys a request deletes, read from its XML body as it streams to the
//! origin, so exactly those mappings (in memory and persisted) and their blocks are dropped.

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// The largest DeleteObjects body read for keys: S3 allows 1,000 keys of up to 1,024 bytes
/// each, which with the XML around them stays under this.
pub const MAX_DELETE_BODY: usize = 2 << 20;

/// The keys of a DeleteObjects body, parsed once at its end (`None`: unreadable).
#[derive(Clone)]
pub(crate) struct DeleteKeys(pub(crate) Option<Vec<String>>);

/// The body of one DeleteObjects request, collected in [`floe_core::FilterCtx::ext`].
#[derive(Default, Clone)]
pub(crate) struct DeleteBody {
    buf: BytesMut,
    /// The body outgrew [`MAX_DELETE_BODY`]: its keys are unknown.
    overflow: bool,
}

impl DeleteBody {
    /// Adds one piece of the body.
    pub(crate) fn push(&mut self, piece: &Bytes) {
        if self.buf.len() + piece.len() > MAX_DELETE_BODY {
            self.overflow = true;
            self.buf = BytesMut::new();
        } else if !self.overflow {
            self.buf.extend_from_slice(piece);
        }
    }

    /// The keys named, or `None` when the body could not be read (too large, not S3's XML).
    pub(crate) fn keys(&self) -> Option<Vec<String>> {
        if self.overflow {
            return None;
        }
        parse_keys(&self.buf)
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
    fn an_oversized_body_has_unknown_keys() {
        let mut b = DeleteBody::default();
        b.push(&Bytes::from_static(
            b"<Delete><Object><Key>k</Key></Object>",
        ));
        b.push(&Bytes::from_static(b"</Delete>"));
        assert_eq!(b.keys(), Some(vec!["k".to_owned()]));
        b.push(&Bytes::from(vec![b' '; MAX_DELETE_BODY]));
        assert_eq!(b.keys(), None);
    }
}
