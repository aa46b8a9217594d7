//! Which store an object's blocks go to, and whether its name is ever rewritten. Iceberg never
//! rewrites data/delete files, manifests, manifest lists, versioned metadata.json or Puffin
//! files, so their key->ETag mapping can be kept until Floe sees a write; everything else is
//! revalidated after a TTL.

use globset::{Glob, GlobSet, GlobSetBuilder};

/// The store a class of objects lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Planning metadata: whole object in the metadata store.
    Metadata,
    /// Table data: the footer suffix in the metadata store, the rest in the data store.
    Data,
    /// A pinned table's files, whole, in the kept store: DRAM the other stores cannot evict
    /// (see [`crate::kept`]). Never a rule's store: only the control plane's pins name it.
    Kept,
    /// A file pinned in part (some columns): the blocks its pinned ranges overlap are kept, the
    /// others stored as a data file's ([`crate::cache::BlockCache::store_of`] decides per
    /// block). A class only: no block is ever stored under it.
    KeptPart,
}

/// A classification rule: a glob over the object key.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Glob over the key (`*` does not cross '/', `**` does).
    pub pattern: String,
    /// Target store.
    pub store: Store,
    /// Whether the name is never rewritten (no TTL).
    pub immutable: bool,
}

impl From<floe_core::wire::StoreName> for Store {
    fn from(s: floe_core::wire::StoreName) -> Self {
        match s {
            floe_core::wire::StoreName::Metadata => Store::Metadata,
            floe_core::wire::StoreName::Data => Store::Data,
        }
    }
}

/// The default Iceberg rules, first match wins.
pub fn iceberg_defaults() -> Vec<Rule> {
    let r = |p: &str, store, immutable| Rule {
        pattern: p.to_owned(),
        store,
        immutable,
    };
    vec![
        r("**/version-hint.text", Store::Metadata, false),
        r("**/v[0-9]*.metadata.json", Store::Metadata, true),
        r(
            "**/[0-9][0-9][0-9][0-9][0-9]-*.metadata.json",
            Store::Metadata,
            true,
        ),
        r("**/*.metadata.json", Store::Metadata, false),
        r("**/snap-*.avro", Store::Metadata, true),
        r("**/*-m[0-9]*.avro", Store::Metadata, true),
        r("**/metadata/*.avro", Store::Metadata, true),
        r("**/*.puffin", Store::Metadata, true),
        r("**/*.stats", Store::Metadata, true),
        r("**/*.parquet", Store::Data, true),
        r("**/*.orc", Store::Data, true),
        r("**/data/**/*.avro", Store::Data, true),
    ]
}

/// Compiled rules.
pub struct Classifier {
    set: GlobSet,
    rules: Vec<Rule>,
}

/// A class decision for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// Target store.
    pub store: Store,
    /// No TTL needed.
    pub immutable: bool,
    /// Parquet file: its footer suffix goes to the metadata store.
    pub parquet: bool,
}

/// A classification rule that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("pattern {pattern:?}: {source}")]
pub struct RuleError {
    /// The glob.
    pub pattern: String,
    /// Why it does not compile.
    #[source]
    pub source: globset::Error,
}

impl Classifier {
    /// Compiles rules; an invalid glob names itself.
    pub fn new(rules: Vec<Rule>) -> Result<Self, RuleError> {
        let mut b = GlobSetBuilder::new();
        for r in &rules {
            let g = Glob::new(&r.pattern).map_err(|source| RuleError {
                pattern: r.pattern.clone(),
                source,
            })?;
            b.add(g);
        }
        let set = b.build().map_err(|source| RuleError {
            pattern: String::new(),
            source,
        })?;
        Ok(Self { set, rules })
    }

    /// Classifies a key; unmatched keys are mutable data.
    pub fn classify(&self, key: &str) -> Class {
        let parquet = key.ends_with(".parquet");
        let first = self.set.matches(key).into_iter().min();
        match first.and_then(|i| self.rules.get(i)) {
            Some(r) => Class {
                store: r.store,
                immutable: r.immutable,
                parquet,
            },
            None => Class {
                store: Store::Data,
                immutable: false,
                parquet,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iceberg_names() {
        let c = Classifier::new(iceberg_defaults()).unwrap();
        let k = |s: &str| c.classify(s);
        assert_eq!(
            k("wh/db/t/metadata/version-hint.text"),
            Class {
                store: Store::Metadata,
                immutable: false,
                parquet: false
            }
        );
        assert!(k("wh/db/t/metadata/v3.metadata.json").immutable);
        assert!(
            k("wh/db/t/metadata/00002-6f1c2a4e-8d55-4c4e-9a59-1d2b3c4d5e6f.metadata.json")
                .immutable
        );
        assert!(k("wh/db/t/metadata/snap-123-1-abc.avro").immutable);
        assert_eq!(k("wh/db/t/metadata/abc-m0.avro").store, Store::Metadata);
        assert_eq!(
            k("wh/db/t/data/p=1/00000-0-abc.parquet"),
            Class {
                store: Store::Data,
                immutable: true,
                parquet: true
            }
        );
        assert!(k("wh/db/t/metadata/x.puffin").immutable);
        assert_eq!(
            k("random/file.csv"),
            Class {
                store: Store::Data,
                immutable: false,
                parquet: false
            }
        );
    }
}
