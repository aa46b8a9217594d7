//! ListMultipartUploads through a write-back route: the origin's page with the uploads Floe
//! staged (on any node of the fleet) merged in, as `<Upload>` entries (or a `<CommonPrefixes>`
//! entry under a delimiter), by key, within the page's bounds as for object listings (see
//! [`crate::list`]): after `key-marker`, and up to the page's last key when it is truncated.
//! Tools that clean up abandoned uploads (the AWS CLI, S3A's purge, rclone's cleanup) then
//! see Floe's as well as the origin's.

use std::sync::Arc;

use bytes::Bytes;
use floe_core::fleet::PeerReply;
use floe_core::xml_escape;
use serde::{Deserialize, Serialize};

use crate::list::{ListAsk, Page};
use crate::node::Node;
use crate::wire::Call;

/// An upload in progress, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenUpload {
    /// Upload id.
    pub id: String,
    /// Key.
    pub key: String,
    /// When it was created (ms since the epoch).
    pub started_ms: u64,
}

fn entry(ask: &ListAsk, u: &OpenUpload) -> String {
    let who = "<ID>floe</ID><DisplayName>floe</DisplayName>";
    format!(
        "<Upload><Key>{}</Key><UploadId>{}</UploadId><Initiator>{who}</Initiator><Owner>{who}</Owner><StorageClass>STANDARD</StorageClass><Initiated>{}</Initiated></Upload>",
        ask.show(&u.key),
        xml_escape(&u.id),
        crate::list_parts::rfc3339(u.started_ms)
    )
}

/// The origin's ListMultipartUploads page `xml` with `open` merged in.
pub fn merge(xml: &str, ask: &ListAsk, open: &[OpenUpload]) -> String {
    let Some(mut page) = Page::parse(xml, ask, "Upload", "</ListMultipartUploadsResult>") else {
        return xml.to_owned();
    };
    let mut ours: Vec<&OpenUpload> = open.iter().collect();
    ours.sort_by(|a, b| (&a.key, a.started_ms).cmp(&(&b.key, b.started_ms)));
    for u in ours {
        if page.takes(ask, &u.key) {
            page.entries.push((u.key.clone(), entry(ask, u)));
        }
    }
    page.render().0
}

impl Node {
    /// The uploads of `bucket` open on any active node.
    pub async fn open_uploads(self: &Arc<Self>, bucket: &str) -> Vec<OpenUpload> {
        let mut all = self.open_here(bucket);
        for peer in self.others() {
            let call = Call::Uploads {
                bucket: bucket.to_owned(),
            };
            if let Ok(r) = self.ask(&peer, call).await {
                if let Ok(theirs) = serde_json::from_slice::<Vec<OpenUpload>>(&r.body) {
                    all.extend(theirs);
                }
            }
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all.dedup_by(|a, b| a.id == b.id); // an upload known to several nodes lists once
        all
    }

    fn open_here(&self, bucket: &str) -> Vec<OpenUpload> {
        self.uploads
            .listing(bucket)
            .into_iter()
            .map(|(id, key, started_ms)| OpenUpload {
                id,
                key,
                started_ms,
            })
            .collect()
    }

    /// Answers `Call::Uploads`: the uploads of `bucket` this node knows.
    pub(crate) fn serve_open_uploads(&self, bucket: &str) -> PeerReply {
        let body = serde_json::to_vec(&self.open_here(bucket)).unwrap_or_default();
        PeerReply {
            status: 200,
            body: Bytes::from(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "<?xml version=\"1.0\"?><ListMultipartUploadsResult><Bucket>b</Bucket><KeyMarker></KeyMarker><Prefix>t/</Prefix><Delimiter>/</Delimiter><MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated><Upload><Key>t/a</Key><UploadId>o1</UploadId></Upload><Upload><Key>t/c</Key><UploadId>o2</UploadId></Upload><CommonPrefixes><Prefix>t/m/</Prefix></CommonPrefixes></ListMultipartUploadsResult>";

    fn open(id: &str, key: &str, started_ms: u64) -> OpenUpload {
        OpenUpload {
            id: id.into(),
            key: key.into(),
            started_ms,
        }
    }

    fn ids(xml: &str) -> Vec<String> {
        xml.split("<UploadId>")
            .skip(1)
            .filter_map(|s| s.split("</UploadId>").next())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn floes_uploads_join_the_page_by_key_and_roll_up_under_the_delimiter() {
        let ask = ListAsk {
            prefix: "t/".into(),
            delimiter: Some("/".into()),
            ..ListAsk::default()
        };
        let out = merge(
            PAGE,
            &ask,
            &[
                open("f2", "t/c", 9),
                open("f1", "t/b", 5),
                open("f3", "t/m/x", 1),
                open("f4", "t/n/y", 1),
                open("f5", "u/z", 1),
            ],
        );
        assert_eq!(ids(&out), ["o1", "f1", "o2", "f2"]);
        assert!(out.contains("<Key>t/b</Key><UploadId>f1</UploadId><Initiator>"));
        assert!(out.contains("<Initiated>1970-01-01T00:00:00.005Z</Initiated>"));
        assert_eq!(out.matches("<Prefix>t/m/</Prefix>").count(), 1);
        assert!(out.ends_with(
            "<CommonPrefixes><Prefix>t/n/</Prefix></CommonPrefixes></ListMultipartUploadsResult>"
        ));
    }

    #[test]
    fn a_truncated_page_takes_only_uploads_up_to_its_last_key_after_the_marker() {
        let page = PAGE.replace("<IsTruncated>false", "<IsTruncated>true");
        let ask = ListAsk {
            prefix: "t/".into(),
            after: Some("t/a".into()),
            ..ListAsk::default()
        };
        let out = merge(
            &page,
            &ask,
            &[
                open("f0", "t/0", 1),
                open("f1", "t/b", 1),
                open("f9", "t/d", 1),
            ],
        );
        assert_eq!(ids(&out), ["o1", "f1", "o2"]);
    }
}
