//! ListObjects and ListObjectsV2 through a write-back route: the origin's page, with the
//! staged writes it does not have yet merged in (as `<Contents>`, or as a `<CommonPrefixes>`
//! entry under a delimiter), in key order, within the page's bounds: after the request's
//! `marker`/`start-after`, and, when the page is truncated, up to its last key.

use std::sync::Arc;

use floe_core::xml_escape;

use crate::journal::Record;

/// What the request asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListAsk {
    /// `prefix`.
    pub prefix: String,
    /// `delimiter`.
    pub delimiter: Option<String>,
    /// `marker` (v1) or `start-after` (v2): keys after it only.
    pub after: Option<String>,
    /// `encoding-type=url`: keys in the answer are URL-encoded.
    pub url: bool,
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#34;", "\"")
        .replace("&amp;", "&")
}

pub(crate) fn between<'a>(s: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let i = s.find(open)? + open.len();
    let j = s[i..].find(close)? + i;
    Some(&s[i..j])
}

impl ListAsk {
    pub(crate) fn show(&self, key: &str) -> String {
        if self.url {
            floe_core::uri::uri_encode(key, false)
        } else {
            xml_escape(key)
        }
    }

    /// The common prefix `key` rolls up into under the delimiter, if any (`key` starts with
    /// the prefix).
    pub(crate) fn rolled_up(&self, key: &str) -> Option<String> {
        let d = self.delimiter.as_deref().filter(|d| !d.is_empty())?;
        let tail = key.get(self.prefix.len()..)?;
        tail.find(d)
            .map(|i| format!("{}{}", self.prefix, &tail[..i + d.len()]))
    }

    /// Whether `key` belongs in a page: under the prefix, after the marker, and up to the
    /// page's last key `upper` when the page is truncated.
    pub(crate) fn takes(&self, key: &str, truncated: bool, upper: Option<&str>) -> bool {
        key.starts_with(&self.prefix)
            && self.after.as_deref().is_none_or(|a| key > a)
            && (!truncated || upper.is_some_and(|u| key <= u))
    }

    pub(crate) fn read(&self, shown: &str) -> String {
        if self.url {
            percent_decode(shown)
        } else {
            unescape(shown)
        }
    }
}

/// A query value, `+` and percent escapes decoded.
pub fn decode_query(v: &str) -> String {
    percent_decode(&v.replace('+', " "))
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn contents(ask: &ListAsk, r: &Record) -> String {
    let modified = crate::list_parts::rfc3339(r.acked_ms);
    format!(
        "<Contents><Key>{}</Key><LastModified>{modified}</LastModified><ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
        ask.show(&r.key),
        xml_escape(&r.etag),
        r.geometry.size
    )
}

/// The origin's list page `xml` with the staged writes in `dirty` merged in.
pub fn merge(xml: &str, ask: &ListAsk, dirty: &[Arc<Record>]) -> String {
    const OPEN: &str = "<Contents>";
    const CLOSE: &str = "</Contents>";
    let mut rest = xml.to_owned();
    let at = rest
        .find(OPEN)
        .or_else(|| rest.find("<CommonPrefixes>"))
        .or_else(|| rest.find("</ListBucketResult>"))
        .unwrap_or(rest.len());
    let mut entries: Vec<(String, String)> = Vec::new();
    while let Some(i) = rest.find(OPEN) {
        let Some(j) = rest[i..].find(CLOSE).map(|j| i + j + CLOSE.len()) else {
            break;
        };
        let block: String = rest.drain(i..j).collect();
        let key = between(&block, "<Key>", "</Key>")
            .map(|k| ask.read(k))
            .unwrap_or_default();
        entries.push((key, block));
    }
    let truncated = xml.contains("<IsTruncated>true</IsTruncated>");
    let upper = entries.iter().map(|(k, _)| k.clone()).max();
    if truncated && upper.is_none() {
        return xml.to_owned(); // a page of common prefixes only: its bounds are unknown
    }
    let (mut added, mut prefixes) = (0usize, Vec::new());
    for r in dirty {
        let k = r.key.as_str();
        if !ask.takes(k, truncated, upper.as_deref()) {
            continue;
        }
        if let Some(p) = ask.rolled_up(k) {
            let shown = format!("<Prefix>{}</Prefix>", ask.show(&p));
            if !xml.contains(&format!("<CommonPrefixes>{shown}")) && !prefixes.contains(&shown) {
                prefixes.push(shown);
            }
            continue;
        }
        match entries.iter_mut().find(|(e, _)| e == k) {
            Some(e) => e.1 = contents(ask, r),
            None => {
                entries.push((k.to_owned(), contents(ask, r)));
                added += 1;
            }
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let block: String = entries.into_iter().map(|(_, b)| b).collect();
    rest.insert_str(at.min(rest.len()), &block);
    if !prefixes.is_empty() {
        let cps: String = prefixes
            .iter()
            .map(|p| format!("<CommonPrefixes>{p}</CommonPrefixes>"))
            .collect();
        let end = rest.rfind("</ListBucketResult>").unwrap_or(rest.len());
        rest.insert_str(end, &cps);
    }
    let grown = added + prefixes.len();
    if grown > 0 {
        if let Some(n) =
            between(&rest, "<KeyCount>", "</KeyCount>").and_then(|n| n.parse::<usize>().ok())
        {
            rest = rest.replacen(
                &format!("<KeyCount>{n}</KeyCount>"),
                &format!("<KeyCount>{}</KeyCount>", n + grown),
                1,
            );
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, size: u64) -> Arc<Record> {
        Arc::new(crate::journal::sample(
            key,
            size,
            "\"e1\"",
            1_764_540_000_000,
        ))
    }

    const PAGE: &str = "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name><Prefix>t/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated><Contents><Key>t/a</Key><Size>1</Size></Contents><Contents><Key>t/c</Key><Size>3</Size></Contents><CommonPrefixes><Prefix>t/m/</Prefix></CommonPrefixes></ListBucketResult>";

    fn keys(xml: &str) -> Vec<String> {
        xml.split("<Contents><Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn staged_keys_join_the_page_in_order_and_roll_up_under_the_delimiter() {
        let ask = ListAsk {
            prefix: "t/".into(),
            delimiter: Some("/".into()),
            ..ListAsk::default()
        };
        let out = merge(
            PAGE,
            &ask,
            &[
                rec("t/b", 7),
                rec("t/c", 9),
                rec("t/n/x", 1),
                rec("t/m/y", 1),
                rec("u/z", 1),
            ],
        );
        assert_eq!(keys(&out), ["t/a", "t/b", "t/c"]);
        assert!(
            out.contains("<Key>t/c</Key><LastModified>2025-"),
            "a staged rewrite replaces the origin's entry: {out}"
        );
        assert!(out.contains("<Size>9</Size>") && out.contains("<ETag>&quot;e1&quot;</ETag>"));
        assert_eq!(
            out.matches("<CommonPrefixes><Prefix>t/m/</Prefix>").count(),
            1
        );
        assert!(out
            .contains("<CommonPrefixes><Prefix>t/n/</Prefix></CommonPrefixes></ListBucketResult>"));
        assert!(out.contains("<KeyCount>4</KeyCount>"));
    }

    #[test]
    fn a_truncated_page_takes_only_keys_up_to_its_last_and_after_the_marker() {
        let page = PAGE.replace("<IsTruncated>false", "<IsTruncated>true");
        let ask = ListAsk {
            prefix: "t/".into(),
            after: Some("t/a".into()),
            ..ListAsk::default()
        };
        let out = merge(&page, &ask, &[rec("t/0", 1), rec("t/b", 1), rec("t/d", 1)]);
        assert_eq!(keys(&out), ["t/a", "t/b", "t/c"]);
    }

    #[test]
    fn url_encoded_listings_stay_encoded() {
        let page = "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a%20b</Key></Contents></ListBucketResult>";
        let ask = ListAsk {
            url: true,
            ..ListAsk::default()
        };
        let out = merge(page, &ask, &[rec("a c", 1), rec("a b", 2)]);
        assert_eq!(keys(&out), ["a%20b", "a%20c"]);
    }
}
