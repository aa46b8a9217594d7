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
            floe_core::xml_unescape(shown)
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

/// An origin list page taken apart for merging: its entries (key, XML block) lifted out,
/// where they go back, and its bounds. Shared by object and upload listings.
pub(crate) struct Page<'a> {
    xml: &'a str,
    rest: String,
    at: usize,
    end_tag: &'static str,
    /// The page's entries and the merged ones, by key once [`Page::render`] sorts them.
    pub(crate) entries: Vec<(String, String)>,
    truncated: bool,
    upper: Option<String>,
    prefixes: Vec<String>,
}

impl<'a> Page<'a> {
    /// `xml` with its `entry` elements (e.g. `Contents`) lifted out; `None` for a truncated
    /// page of common prefixes only (its bounds are unknown: nothing may be merged).
    pub(crate) fn parse(
        xml: &'a str,
        ask: &ListAsk,
        entry: &str,
        end_tag: &'static str,
    ) -> Option<Self> {
        let (open, close) = (format!("<{entry}>"), format!("</{entry}>"));
        let mut rest = xml.to_owned();
        let at = rest
            .find(&open)
            .or_else(|| rest.find("<CommonPrefixes>"))
            .or_else(|| rest.find(end_tag))
            .unwrap_or(rest.len());
        let mut entries = Vec::new();
        while let Some(i) = rest.find(&open) {
            let Some(j) = rest[i..].find(&close).map(|j| i + j + close.len()) else {
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
            return None;
        }
        Some(Self {
            xml,
            rest,
            at,
            end_tag,
            entries,
            truncated,
            upper,
            prefixes: Vec::new(),
        })
    }

    /// Whether `key` is merged into this page; a key rolling up under the delimiter is taken
    /// as its common prefix (once), and `false` returned.
    pub(crate) fn takes(&mut self, ask: &ListAsk, key: &str) -> bool {
        if !ask.takes(key, self.truncated, self.upper.as_deref()) {
            return false;
        }
        let Some(p) = ask.rolled_up(key) else {
            return true;
        };
        let shown = format!("<Prefix>{}</Prefix>", ask.show(&p));
        if !self.xml.contains(&format!("<CommonPrefixes>{shown}"))
            && !self.prefixes.contains(&shown)
        {
            self.prefixes.push(shown);
        }
        false
    }

    /// The page with its entries back in key order (stable: the origin's order within a key
    /// stays) and the new common prefixes at its end; and how many prefixes were added.
    pub(crate) fn render(mut self) -> (String, usize) {
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
        let block: String = self.entries.into_iter().map(|(_, b)| b).collect();
        self.rest.insert_str(self.at.min(self.rest.len()), &block);
        let cps: String = self
            .prefixes
            .iter()
            .map(|p| format!("<CommonPrefixes>{p}</CommonPrefixes>"))
            .collect();
        let end = self.rest.rfind(self.end_tag).unwrap_or(self.rest.len());
        self.rest.insert_str(end, &cps);
        (self.rest, self.prefixes.len())
    }
}

/// The origin's list page `xml` with the staged writes in `dirty` merged in.
pub fn merge(xml: &str, ask: &ListAsk, dirty: &[Arc<Record>]) -> String {
    let Some(mut page) = Page::parse(xml, ask, "Contents", "</ListBucketResult>") else {
        return xml.to_owned();
    };
    let mut added = 0usize;
    for r in dirty {
        let k = r.key.as_str();
        if !page.takes(ask, k) {
            continue;
        }
        match page.entries.iter_mut().find(|(e, _)| e == k) {
            Some(e) => e.1 = contents(ask, r),
            None => {
                page.entries.push((k.to_owned(), contents(ask, r)));
                added += 1;
            }
        }
    }
    let (mut rest, prefixes) = page.render();
    let grown = added + prefixes;
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
