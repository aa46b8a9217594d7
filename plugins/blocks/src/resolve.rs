//! Resolving (bucket, key) -> version (ETag, size): the in-memory table, then the persisted
//! mapping of an immutable object, then the origin. A cold GET resolves with the GET itself
//! (its answer names the version and its body serves the read: one round trip); a HEAD, or a
//! rewritable object's expired mapping (revalidated with If-None-Match), asks with a HEAD.

use std::sync::Arc;
use std::time::Instant;

use floe_core::fleet::PeerError;
use floe_core::{BucketName, ETag, ObjectKey, OriginError};
use floe_filter::FilterCtx;

use crate::cache::Fill;
use crate::classify::{Class, Store};
use crate::filter::{BlockFilter, Resolved};
use crate::inflight::{wait_for, Claim};
use crate::mapping::{Mapping, Ticket};
use crate::range::{align, resolve as resolve_range, RangeAsk};
use crate::reader::{adopt, Adopted};

/// How a request may resolve a key the cache does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe<'a> {
    /// With a HEAD.
    Head,
    /// With the request's own GET, carrying its Range header (`None`: the whole object); a
    /// multi-range or unsatisfiable header falls back to a HEAD.
    Get(Option<&'a str>),
    /// With a HEAD at the origin, never asking the owner (answering a peer's head ask).
    Local,
}

/// A resolved version, and the fill the resolving GET started (for the resolving request).
pub(crate) struct Resolution {
    /// The version.
    pub map: Arc<Mapping>,
    /// Known without asking the origin.
    pub known: bool,
    /// The resolving GET's body, being stored and tapped for this response.
    pub adopted: Option<Adopted>,
}

impl BlockFilter {
    /// Resolves the current version of the request's key: `Ok(None)` means "let the origin
    /// answer". Concurrent cold requests for one key share one origin request.
    pub(crate) async fn resolve(
        &self,
        ctx: &FilterCtx,
        probe: Probe<'_>,
    ) -> Result<Option<Resolution>, OriginError> {
        let (Some(bucket), Some(key)) = (&ctx.bucket, &ctx.key) else {
            return Ok(None);
        };
        self.resolve_key(bucket, key, probe).await
    }

    /// As [`BlockFilter::resolve`], for a bucket and key.
    pub(crate) async fn resolve_key(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        probe: Probe<'_>,
    ) -> Result<Option<Resolution>, OriginError> {
        // Before anything is asked: an answer that crosses a write of the key is not kept.
        let ticket = self.map.ticket(key.as_str());
        if let Some(map) = self.usable(key) {
            return Ok(Some(Resolution {
                map,
                known: true,
                adopted: None,
            }));
        }
        // Classification (glob matching) only on the slow path; known keys carry their class.
        let class = self.class_of(key.as_str());
        // A resolve for a peer (Local) never waits on one that asks a peer: two nodes asking
        // each other would wait on each other's claims until their timeouts.
        // A read that begins after a write of the key never joins a resolve begun before it
        // (which may answer the version the write replaced): the flight is per drop ticket.
        let name = match probe {
            Probe::Local => format!("\0{}\0{ticket}", key.as_str()),
            _ => format!("{}\0{ticket}", key.as_str()),
        };
        let (r, adopted) = match self.resolving.claim(&name) {
            Claim::Theirs(rx) => {
                let abandoned = Err(OriginError::Transport("resolve abandoned".into()));
                (wait_for(rx, abandoned).await, None)
            }
            Claim::Mine(tx) => {
                // A resolve that ended between the look above and this claim has left the
                // version in the table: use it rather than ask the origin a second time.
                let (r, adopted) = match self.usable(key) {
                    Some(map) => (Ok(Some((map, true))), None),
                    None => {
                        let known = self.map.get(key.as_str());
                        self.resolve_slow(bucket, (key, ticket), known, class, probe)
                            .await
                    }
                };
                let _ = tx.send(Some(r.clone()));
                self.resolving.release(&name);
                (r, adopted)
            }
        };
        Ok(r?.map(|(map, known)| Resolution {
            map,
            known,
            adopted,
        }))
    }

    /// The version the table holds for `key`, if it may be used without asking anyone
    /// (immutable, or rewritable and checked within the TTL; not marked stale).
    fn usable(&self, key: &ObjectKey) -> Option<Arc<Mapping>> {
        let m = self.map.get(key.as_str())?;
        let fresh = m.class.immutable || m.checked.elapsed() < self.cache.settings.mutable_ttl;
        (fresh && !m.stale).then_some(m)
    }

    async fn resolve_slow(
        &self,
        bucket: &BucketName,
        (key, ticket): (&ObjectKey, Ticket),
        known: Option<Arc<Mapping>>,
        class: Class,
        probe: Probe<'_>,
    ) -> (Resolved, Option<Adopted>) {
        // A write acknowledged on this node and not at the origin yet is the version, whatever
        // the owner knows, and whatever this node persisted before it.
        if let Some(head) = self.origin.local_head(bucket, key) {
            tracing::debug!(
                key = key.as_str(),
                etag = head.etag.as_str(),
                "resolved from a staged write"
            );
            // Not persisted: the version is not at the origin yet. A restart resolves to the
            // write again while it is staged, and to the origin's version after; a persisted
            // copy would outlive a write that overtakes it while this node is away.
            let m = self.remember_as(key, Mapping::new(head, class), ticket, false);
            return (Ok(Some((m, false))), None);
        }
        let object_key: Arc<str> = key.shared();
        let trusted =
            !self.map.dropped_since_boot(key.as_str()) && self.cache.returning.trusts_persisted();
        if known.is_none() && class.immutable && trusted {
            if let Some(m) = self
                .cache
                .load_mapping(&self.bucket_key, &object_key, class)
                .await
            {
                let m = Arc::new(m);
                tracing::debug!(
                    key = key.as_str(),
                    etag = m.etag.as_str(),
                    "resolved from a persisted mapping"
                );
                self.map.put_unless_dropped(key.as_str(), m.clone(), ticket);
                return (Ok(Some((m, true))), None);
            }
        }
        let hint = known.as_ref().map(|m| &m.etag);
        let probe = match self.ask_owner((key, ticket), class, probe, hint).await {
            Ok(done) => return (done, None),
            Err(p) => p,
        };
        if let (None, Probe::Get(range)) = (&known, probe) {
            // Only a single range (or none) can travel as the request's own GET.
            if matches!(
                resolve_range(range, u64::MAX),
                RangeAsk::Whole | RangeAsk::Part { .. }
            ) {
                return self
                    .resolve_by_get(bucket, (key, ticket), class, range)
                    .await;
            }
        }
        let fresh = match self
            .origin
            .head(bucket, key, known.as_ref().map(|m| &m.etag))
            .await
        {
            Ok(Some(head)) => {
                tracing::debug!(
                    key = key.as_str(),
                    etag = head.etag.as_str(),
                    "resolved at the origin"
                );
                Mapping::new(head, class)
            }
            Ok(None) => match &known {
                Some(m) => Mapping {
                    checked: Instant::now(),
                    stale: false,
                    ..Mapping::clone(m)
                },
                None => return (Ok(None), None),
            },
            Err(OriginError::NotFound) => return (Ok(None), None),
            Err(e) => return (Err(e), None),
        };
        (Ok(Some((self.remember(key, fresh, ticket), false))), None)
    }

    /// In a fleet, the owner of the object's first block (or its donor) resolves it for every
    /// node (one origin request fleet-wide). `Err(probe)`: resolve here with `probe` (no fleet, this
    /// node owns it, or the owner did not answer). A GET resolves here only when this node
    /// owns the first block it reads; otherwise a HEAD, so a node never fills others' blocks.
    async fn ask_owner<'p>(
        &self,
        (key, ticket): (&ObjectKey, Ticket),
        class: Class,
        probe: Probe<'p>,
        stale: Option<&ETag>,
    ) -> Result<Resolved, Probe<'p>> {
        let Some(fleet) = self.fleet.as_ref().filter(|_| probe != Probe::Local) else {
            return Err(probe);
        };
        // A donor of block 0 (a draining former owner, or the owner this node took it from)
        // knows the version too, and its answer keeps the bytes coming from it.
        let bucket = &*self.bucket_key;
        let asked = fleet
            .owner(bucket, key.as_str(), 0)
            .or_else(|| fleet.donors(bucket, key.as_str(), 0).into_iter().next());
        let Some(owner) = asked else {
            let first = match probe {
                Probe::Get(_) if !class.immutable => Some(0),
                // A suffix range's first block is unknown before the size is.
                Probe::Get(Some(r)) if r.trim().starts_with("bytes=-") => None,
                Probe::Get(range) => match resolve_range(range, u64::MAX) {
                    RangeAsk::Whole => Some(0),
                    RangeAsk::Part { first, .. } => Some(first / self.cache.settings.block_bytes),
                    _ => None,
                },
                _ => None,
            };
            let mine = first.is_some_and(|i| self.owns(key, i));
            return Err(if mine { probe } else { Probe::Head });
        };
        match crate::asks::head(&**fleet, &owner, (&self.bucket_key, key.as_str()), stale).await {
            Ok(head) => {
                tracing::debug!(key = key.as_str(), etag = head.etag.as_str(), owner = %owner.id, "resolved by the owner");
                let m = self.remember(key, Mapping::new(head, class), ticket);
                Ok(Ok(Some((m, false))))
            }
            Err(PeerError::NotFound) => Ok(Ok(None)),
            Err(e) => {
                tracing::debug!(owner = %owner.id, error = %e, "owner did not resolve: asking the origin");
                Err(probe)
            }
        }
    }

    /// Whether this node owns block `index` of `key` and has no donor for it (no fleet:
    /// always).
    pub(crate) fn owns(&self, key: &ObjectKey, index: u64) -> bool {
        self.fleet.as_ref().is_none_or(|f| {
            f.owner(&self.bucket_key, key.as_str(), index).is_none()
                && f.donors(&self.bucket_key, key.as_str(), index).is_empty()
        })
    }

    /// In a fleet, a resolving GET fetches only the leading blocks this node owns (and holds no
    /// donor for): the rest of the read comes from their owners, so a node never fills another
    /// node's blocks. `None`: the request's range as it is.
    fn own_span(&self, key: &ObjectKey, class: Class, range: Option<&str>) -> Option<String> {
        self.fleet.as_ref()?;
        if !class.immutable {
            return None; // one owner for every block
        }
        let bs = self.cache.settings.block_bytes;
        let (first, last) = match resolve_range(range, u64::MAX) {
            RangeAsk::Whole => (0, u64::MAX),
            RangeAsk::Part { first, last } => (first, last),
            _ => return None,
        };
        let (b0, b1) = (first / bs, last / bs);
        let end =
            (b0..=b1.min(b0 + self.cache.settings.max_run_blocks)).find(|i| !self.owns(key, *i))?;
        // `end == b0`: the view changed since the caller checked block `b0`; read as asked.
        let end_byte = end
            .checked_mul(bs)?
            .checked_sub(1)
            .filter(|e| *e >= first)?;
        Some(format!("bytes={first}-{}", end_byte.min(last)))
    }

    /// The request's range carried on to the end of the column chunk it starts, when the
    /// control plane published the object's chunks; `None`: the range as it is.
    fn chunk_span(&self, key: &ObjectKey, range: Option<&str>) -> Option<String> {
        let RangeAsk::Part { first, last } = resolve_range(range, u64::MAX) else {
            return None;
        };
        let span = (first, last);
        let end = self
            .cache
            .hints
            .fill_end(&self.bucket_key, key.as_str(), None, span);
        (end > last.saturating_add(1)).then(|| format!("bytes={first}-{}", end - 1))
    }

    /// Resolves with the request's own GET; its body fills the blocks it covers.
    async fn resolve_by_get(
        &self,
        bucket: &BucketName,
        (key, ticket): (&ObjectKey, Ticket),
        class: Class,
        range: Option<&str>,
    ) -> (Resolved, Option<Adopted>) {
        // Whole blocks where whole blocks are what a miss fetches (metadata; `fill: block`).
        let bs = self.cache.settings.block_bytes;
        let whole = self.cache.settings.fill == Fill::Block || class.store == Store::Metadata;
        let own = self.own_span(key, class, range);
        // One node reading a known column chunk's start fetches on to the chunk's end.
        let one_node_data = own.is_none() && !whole && self.fleet.is_none();
        let chunk = one_node_data.then(|| self.chunk_span(key, range)).flatten();
        let range = own.as_deref().or(chunk.as_deref()).or(range);
        let aligned = range.filter(|_| whole).map(|r| align(r, bs));
        let range = aligned.as_deref().or(range);
        let got = match self.origin.get_current(bucket, key, range).await {
            Ok(g) => g,
            // Missing, or a range S3 refuses: the origin answers the client itself.
            Err(OriginError::NotFound | OriginError::Status(416)) => return (Ok(None), None),
            Err(e) => return (Err(e), None),
        };
        tracing::debug!(
            key = key.as_str(),
            etag = got.head.etag.as_str(),
            "resolved by the request's GET"
        );
        let m = self.remember(key, Mapping::new(got.head, class), ticket);
        let adopted = (m.size > 0).then(|| {
            let target = self.target(bucket, key, &m);
            adopt(
                &self.cache,
                &self.origin,
                target,
                (got.first, got.last),
                got.body,
            )
        });
        (Ok(Some((m, false))), adopted)
    }

    /// The checksums of version `map` of `key`, learned with one HEAD (asked in checksum mode);
    /// `None` when the origin now has another version or does not answer.
    pub(crate) async fn learn_checksums(
        &self,
        key: &ObjectKey,
        map: &Arc<Mapping>,
    ) -> Option<Arc<Mapping>> {
        let bucket = BucketName::parse(&self.bucket_key).ok()?;
        let ticket = self.map.ticket(key.as_str());
        let head = self.origin.head(&bucket, key, None).await.ok()??;
        if head.etag != map.etag || head.checksums.is_none() {
            return None;
        }
        let fresh = Mapping {
            checksums: Mapping::new(head, map.class).checksums,
            ..Mapping::clone(map)
        };
        Some(self.remember(key, fresh, ticket))
    }

    /// Puts a fresh mapping in the table (and persists it when the object is immutable),
    /// unless the key was dropped since `ticket`: then the mapping only answers the request
    /// that resolved it (which overlapped the write that dropped the key).
    fn remember(&self, key: &ObjectKey, m: Mapping, ticket: Ticket) -> Arc<Mapping> {
        self.remember_as(key, m, ticket, true)
    }

    /// [`BlockFilter::remember`]; `persist`: an immutable object's mapping may be persisted
    /// (false: memory only).
    fn remember_as(
        &self,
        key: &ObjectKey,
        m: Mapping,
        ticket: Ticket,
        persist: bool,
    ) -> Arc<Mapping> {
        let persist = persist && m.class.immutable;
        let m = Arc::new(m);
        if self.map.ticket(key.as_str()) != ticket {
            return m;
        }
        // Persisted first: a drop between the two then removes both (a drop removes the
        // persisted mapping too), never leaving a persisted version behind a dropped one.
        let object_key = key.shared();
        if persist {
            self.cache.save_mapping(&self.bucket_key, &object_key, &m);
        }
        if !self.map.put_unless_dropped(key.as_str(), m.clone(), ticket) && persist {
            self.cache.forget_mapping(&self.bucket_key, &object_key);
        }
        m
    }
}
