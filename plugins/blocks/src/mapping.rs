//! key -> (ETag, size, replayed headers) per route, sharded so lookups take one short lock of
//! one shard. Immutable mappings are also written to the metadata store so they survive a
//! restart.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use floe_core::{ETag, ObjectHead};
use lru::LruCache;

use crate::classify::Class;

const SHARDS: usize = 32;
/// Most mappings one route keeps in memory (per shard: this / SHARDS). A dropped mapping costs
/// one HEAD to re-resolve, or nothing for immutable objects (persisted in the metadata store).
pub const MAX_MAPPINGS: usize = 1 << 20;
/// Drop counters per table (a key's counter is `hash % DROP_SLOTS`): a resolve that began
/// before a key was dropped must not put back the version it found. Fine enough that a write
/// rarely costs an unrelated key's resolve its mapping (it is then only not remembered).
const DROP_SLOTS: usize = 4096;

/// A resolved object version.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// The version's ETag.
    pub etag: ETag,
    /// Shared form of the ETag for block keys.
    pub etag_key: Arc<str>,
    /// The ETag as a header value, parsed once (`None`: not a valid value; sent as text).
    pub etag_value: Option<http::HeaderValue>,
    /// Size in bytes.
    pub size: u64,
    /// Headers replayed on cached answers.
    /// Parsed once here so a hit only clones them.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Full-object checksum headers, sent on whole-object answers to checksum-mode requests;
    /// `None`: not known (resolved by a ranged answer).
    pub checksums: Option<Vec<(http::HeaderName, http::HeaderValue)>>,
    /// Its Last-Modified (from the replayed header), for conditional reads; `None`: unknown.
    pub last_modified: Option<std::time::SystemTime>,
    /// The origin's version id when this mapping is a `versionId` read's (an immutable
    /// version, never the current one's mapping); `None`: the current version.
    pub version_id: Option<Arc<str>>,
    /// Its class.
    pub class: Class,
    /// When it was last confirmed with the origin.
    pub checked: Instant,
    /// A fill found this version gone: the next read revalidates (and, in a fleet, asks the
    /// owner to revalidate too).
    pub stale: bool,
}

impl Mapping {
    /// A mapping from a HEAD.
    pub fn new(head: ObjectHead, class: Class) -> Self {
        let etag_key: Arc<str> = Arc::from(head.etag.as_str());
        let parse = |list: &[(String, String)]| -> Vec<(http::HeaderName, http::HeaderValue)> {
            list.iter()
                .filter_map(|(k, v)| {
                    Some((
                        http::HeaderName::from_bytes(k.as_bytes()).ok()?,
                        http::HeaderValue::from_str(v).ok()?,
                    ))
                })
                .collect()
        };
        let last_modified = head
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("last-modified"))
            .and_then(|(_, v)| httpdate::parse_http_date(v).ok());
        Self {
            last_modified,
            version_id: None,
            etag_value: http::HeaderValue::from_str(head.etag.as_str()).ok(),
            etag: head.etag,
            etag_key,
            size: head.size,
            headers: parse(&head.headers),
            checksums: head.checksums.as_deref().map(parse),
            class,
            checked: Instant::now(),
            stale: false,
        }
    }

    /// Serialises for the metadata store (a line-based text form): ETag, size, `name:value`
    /// header lines, and, when the checksums are known, a `#checksums` line followed by
    /// `!name:value` lines.
    pub fn encode(&self) -> String {
        let mut s = format!("{}\n{}\n", self.etag.as_str(), self.size);
        let mut line = |prefix: &str, k: &http::HeaderName, v: &http::HeaderValue| {
            let Ok(v) = v.to_str() else { return };
            s.push_str(prefix);
            s.push_str(k.as_str());
            s.push(':');
            s.push_str(&v.replace('\n', " "));
            s.push('\n');
        };
        for (k, v) in &self.headers {
            line("", k, v);
        }
        if let Some(sums) = &self.checksums {
            for (k, v) in sums {
                line("!", k, v);
            }
        }
        if self.checksums.is_some() {
            s.push_str("#checksums\n");
        }
        s
    }

    /// [`Mapping::encode`] with the metadata tier's removal count when written (a `#tombs N`
    /// line, see [`crate::tombs`]).
    pub fn encode_stamped(&self, tombs: u64) -> String {
        let mut s = self.encode();
        s.push_str(&format!("#tombs {tombs}\n"));
        s
    }

    /// Parses [`Mapping::encode_stamped`] output: the mapping and its stamp (`None`: written
    /// without one); `None` if damaged.
    pub fn decode_stamped(text: &str, class: Class) -> Option<(Self, Option<u64>)> {
        let stamp = text
            .lines()
            .find_map(|l| l.strip_prefix("#tombs "))
            .and_then(|n| n.trim().parse().ok());
        Some((Self::decode(text, class)?, stamp))
    }

    /// Parses [`Mapping::encode`] output; `None` if damaged.
    pub fn decode(text: &str, class: Class) -> Option<Self> {
        let mut lines = text.lines();
        let etag = ETag::parse(lines.next()?).ok()?;
        let size = lines.next()?.parse().ok()?;
        let (mut headers, mut sums, mut known) = (Vec::new(), Vec::new(), false);
        for l in lines {
            if l == "#checksums" {
                known = true;
            } else if let Some((k, v)) = l.strip_prefix('!').and_then(|l| l.split_once(':')) {
                sums.push((k.to_owned(), v.to_owned()));
            } else if let Some((k, v)) = l.split_once(':') {
                headers.push((k.to_owned(), v.to_owned()));
            }
        }
        Some(Self::new(
            ObjectHead {
                etag,
                size,
                headers,
                checksums: known.then_some(sums),
            },
            class,
        ))
    }
}

/// The sharded table; each shard evicts its least recently used mapping when full, so a hot
/// key survives any number of one-off keys.
pub struct MappingTable {
    shards: Vec<Mutex<LruCache<String, Arc<Mapping>>>>,
    /// How often keys of each slot were dropped (see [`MappingTable::ticket`]).
    drops: Vec<AtomicU64>,
    /// How often a prefix was dropped (any key may have been under it).
    prefix_drops: AtomicU64,
    hasher: RandomState,
    per_shard: usize,
}

/// What a resolve saw of its key's drops when it began (see [`MappingTable::ticket`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64, u64);

impl std::fmt::Display for Ticket {
    /// Names the drop generation: resolves of one key under different tickets never share a
    /// flight (a read after a write must not join a resolve begun before it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl Default for MappingTable {
    fn default() -> Self {
        Self::with_capacity(MAX_MAPPINGS)
    }
}

impl MappingTable {
    /// A table holding at most about `max` mappings.
    pub fn with_capacity(max: usize) -> Self {
        Self {
            per_shard: (max / SHARDS).max(1),
            // Unbounded in the crate's sense (no preallocation of `max` slots); bounded by `put`.
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::unbounded()))
                .collect(),
            drops: (0..DROP_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            prefix_drops: AtomicU64::new(0),
            hasher: RandomState::new(),
        }
    }
}

impl MappingTable {
    fn shard(&self, key: &str) -> &Mutex<LruCache<String, Arc<Mapping>>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        &self.shards[i]
    }

    fn drops_of(&self, key: &str) -> &AtomicU64 {
        // Another bit range of the hash than the shard's, so one shard spreads over slots.
        let i = ((self.hasher.hash_one(key) >> 16) as usize) % DROP_SLOTS;
        &self.drops[i]
    }

    /// Taken before a resolve asks anyone: [`MappingTable::put_unless_dropped`] then keeps
    /// its answer only if `key` was not dropped meanwhile (a write landed while the answer,
    /// perhaps naming the version it replaced, was on its way).
    pub fn ticket(&self, key: &str) -> Ticket {
        Ticket(
            self.drops_of(key).load(Ordering::Acquire),
            self.prefix_drops.load(Ordering::Acquire),
        )
    }

    /// Whether `key` (or a key sharing its drop slot, or a prefix) was dropped since this
    /// table was made. A persisted mapping of such a key is not trusted: the disk tier may
    /// still have been writing it when the drop removed it, and then hold it again.
    pub fn dropped_since_boot(&self, key: &str) -> bool {
        self.ticket(key) != Ticket(0, 0)
    }

    /// [`MappingTable::put`] when `key` was not dropped since `ticket` was taken; `false`:
    /// not recorded (the caller must not persist it either).
    pub fn put_unless_dropped(&self, key: &str, m: Arc<Mapping>, ticket: Ticket) -> bool {
        let Ok(mut s) = self.shard(key).lock() else {
            return false;
        };
        // Drops count under the shard's lock, so no drop slips between this check and the put.
        if self.ticket(key) != ticket {
            return false;
        }
        s.put(key.to_owned(), m);
        while s.len() > self.per_shard {
            s.pop_lru();
        }
        true
    }

    /// The mapping of `key`, if known (and now its shard's most recently used).
    pub fn get(&self, key: &str) -> Option<Arc<Mapping>> {
        self.shard(key).lock().ok()?.get(key).cloned()
    }

    /// Records a mapping, evicting the shard's least recently used one when full.
    pub fn put(&self, key: &str, m: Arc<Mapping>) {
        if let Ok(mut s) = self.shard(key).lock() {
            s.put(key.to_owned(), m);
            while s.len() > self.per_shard {
                s.pop_lru();
            }
        }
    }

    /// Marks the mapping of `key` stale when it still names `etag` (a fill found that version
    /// gone at the origin).
    pub fn mark_stale(&self, key: &str, etag: &ETag) {
        if let Ok(mut s) = self.shard(key).lock() {
            if let Some(m) = s.peek_mut(key) {
                if m.etag == *etag && !m.stale {
                    *m = Arc::new(Mapping {
                        stale: true,
                        ..Mapping::clone(m)
                    });
                }
            }
        }
    }

    /// Drops a key's mapping without fencing resolves under way (the version did not change:
    /// the control plane reclassified the key, and a resolve may put its mapping back).
    pub fn unmap(&self, key: &str) {
        if let Ok(mut s) = self.shard(key).lock() {
            s.pop(key);
        }
    }

    /// Drops a key's mapping; resolves of it under way will not put theirs back.
    pub fn drop_key(&self, key: &str) {
        if let Ok(mut s) = self.shard(key).lock() {
            self.drops_of(key).fetch_add(1, Ordering::AcqRel);
            s.pop(key);
        }
    }

    /// Keys starting with `prefix`.
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.shards {
            if let Ok(s) = s.lock() {
                out.extend(
                    s.iter()
                        .map(|(k, _)| k)
                        .filter(|k| k.starts_with(prefix))
                        .cloned(),
                );
            }
        }
        out
    }

    /// Drops every mapping whose key starts with `prefix`; returns how many.
    pub fn drop_prefix(&self, prefix: &str) -> usize {
        self.prefix_drops.fetch_add(1, Ordering::AcqRel);
        let mut n = 0;
        for s in &self.shards {
            if let Ok(mut s) = s.lock() {
                let doomed: Vec<String> = s
                    .iter()
                    .map(|(k, _)| k)
                    .filter(|k| k.starts_with(prefix))
                    .cloned()
                    .collect();
                for k in &doomed {
                    self.drops_of(k).fetch_add(1, Ordering::AcqRel);
                    s.pop(k);
                }
                n += doomed.len();
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Store;

    #[test]
    fn persisted_form_round_trips_and_rejects_damage() {
        let class = Class {
            store: Store::Data,
            immutable: true,
            parquet: true,
        };
        let head = ObjectHead {
            etag: ETag::parse("\"abc\"").unwrap(),
            size: 42,
            headers: vec![
                ("content-type".into(), "application/octet-stream".into()),
                ("x-amz-meta-a".into(), "b".into()),
            ],
            checksums: Some(vec![("x-amz-checksum-crc32".into(), "AAAAAA==".into())]),
        };
        let m = Mapping::new(head, class);
        let back = Mapping::decode(&m.encode(), class).unwrap();
        assert_eq!((back.etag.as_str(), back.size), ("\"abc\"", 42));
        assert_eq!(back.headers, m.headers);
        assert_eq!(back.checksums, m.checksums);
        assert!(back
            .headers
            .iter()
            .all(|(k, _)| !k.as_str().contains("checksum")));
        let unknown = Mapping::decode("\"abc\"\n42\ncontent-type:x\n", class).unwrap();
        assert!(
            unknown.checksums.is_none(),
            "entries written before checksums are unknown"
        );
        assert!(Mapping::decode("\"abc\"\nnot-a-size\n", class).is_none());
        let (stamped, stamp) = Mapping::decode_stamped(&m.encode_stamped(7), class).unwrap();
        assert_eq!(
            (stamped.headers, stamped.checksums, stamp),
            (m.headers.clone(), m.checksums.clone(), Some(7))
        );
        assert_eq!(Mapping::decode_stamped(&m.encode(), class).unwrap().1, None);
        let t = MappingTable::default();
        t.put("p/a", Arc::new(back));
        assert_eq!(t.keys_with_prefix("p/"), vec!["p/a".to_owned()]);
        assert_eq!(t.drop_prefix("p/"), 1);
        assert!(t.get("p/a").is_none());
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;
    use crate::classify::Store;

    #[test]
    fn table_stays_bounded() {
        let class = Class {
            store: Store::Data,
            immutable: true,
            parquet: false,
        };
        let t = MappingTable::with_capacity(64);
        for i in 0..10_000 {
            let head = ObjectHead {
                etag: ETag::parse("\"e\"").unwrap(),
                size: i,
                headers: vec![],
                checksums: None,
            };
            t.put(&format!("k{i}"), Arc::new(Mapping::new(head, class)));
        }
        assert!(t.keys_with_prefix("k").len() <= 64);
        assert!(t.get("k9999").is_some(), "the newest entry is kept");
    }

    #[test]
    fn a_resolve_that_crossed_a_drop_is_not_kept() {
        let class = Class {
            store: Store::Data,
            immutable: true,
            parquet: true,
        };
        let m = || {
            let etag = ETag::parse("\"old\"").unwrap();
            Arc::new(Mapping::new(
                ObjectHead {
                    etag,
                    size: 1,
                    headers: vec![],
                    checksums: None,
                },
                class,
            ))
        };
        let t = MappingTable::default();
        let before_write = t.ticket("k");
        t.drop_key("k"); // the write landed while the resolve's answer was on its way
        assert!(!t.put_unless_dropped("k", m(), before_write));
        assert!(t.get("k").is_none());
        let before_purge = t.ticket("k");
        t.drop_prefix("");
        assert!(!t.put_unless_dropped("k", m(), before_purge));
        let fresh = t.ticket("k");
        assert!(t.put_unless_dropped("k", m(), fresh));
        assert!(t.get("k").is_some());
        // Another key's drop rarely costs this one (4096 slots): most survive.
        let tickets: Vec<_> = (0..100).map(|i| t.ticket(&format!("o{i}"))).collect();
        t.drop_key("k");
        let kept = (0..100)
            .filter(|i| t.put_unless_dropped(&format!("o{i}"), m(), tickets[*i]))
            .count();
        assert!(kept >= 98, "{kept}");
    }

    #[test]
    fn a_hot_key_survives_a_flood_of_one_off_keys() {
        let class = Class {
            store: Store::Data,
            immutable: true,
            parquet: false,
        };
        let m = |size| {
            let etag = ETag::parse("\"e\"").unwrap();
            Arc::new(Mapping::new(
                ObjectHead {
                    etag,
                    size,
                    headers: vec![],
                    checksums: None,
                },
                class,
            ))
        };
        // Two per shard: with arbitrary eviction the hot key went within a few hundred puts.
        let t = MappingTable::with_capacity(64);
        t.put("hot", m(1));
        for i in 0..20_000 {
            t.put(&format!("cold{i}"), m(i));
            assert!(
                t.get("hot").is_some(),
                "hot key evicted after {i} one-off keys"
            );
        }
        assert!(t.keys_with_prefix("").len() <= 64);
    }
}
