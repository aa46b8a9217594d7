//! The route table: which bucket a request addresses (path-style or virtual-host), and the
//! route (origin, client keys, filter chain) that serves it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use floe_blocks::{BlockCache, BlockFilter};
use floe_core::{BucketName, RequestFilter};
use floe_sigv4::{SigV4Filter, Verifier};

use crate::origin::Origin;
use crate::origin_reader::PingoraOriginReader;
use crate::runtime::{FilterKind, RouteSpec};

/// One route, built once from config.
pub struct Route {
    /// The bucket.
    pub bucket: BucketName,
    /// The origin serving it.
    pub origin: Arc<Origin>,
    /// Access keys allowed here.
    pub clients: HashSet<String>,
    /// Filter stages, in order.
    pub filters: Vec<Arc<dyn RequestFilter>>,
}

/// What a request addresses, from its Host and path.
#[derive(Debug, PartialEq, Eq)]
pub struct Addressed<'a> {
    /// The bucket name as text (validated later against the table), empty for the service.
    pub bucket: &'a str,
    /// The raw, still percent-encoded key path (no leading '/'), empty when none.
    pub raw_key: &'a str,
}

/// Routes by bucket, plus a verifier over every client key (for ListBuckets and for
/// authenticating requests to unknown buckets before saying NoSuchBucket).
pub struct RouteTable {
    routes: HashMap<String, Arc<Route>>,
    hostnames: Vec<String>,
    /// Verifier over all client keys.
    pub any_client: SigV4Filter,
    /// Block-cache stages by bucket (for the admin API).
    pub blocks: HashMap<String, Arc<BlockFilter>>,
}

impl RouteTable {
    /// Builds the table. `origins` must hold every origin the specs name.
    pub fn new(
        specs: &[RouteSpec],
        origins: &HashMap<String, Arc<Origin>>,
        cache: Option<&Arc<BlockCache>>,
        region: &str,
        hostnames: &[String],
    ) -> Self {
        let mut routes = HashMap::new();
        let mut blocks = HashMap::new();
        let mut all_keys = Vec::new();
        for spec in specs {
            let Some(origin) = origins.get(&spec.origin) else {
                continue;
            };
            let mut filters: Vec<Arc<dyn RequestFilter>> = Vec::new();
            for f in &spec.filters {
                match f {
                    FilterKind::SigV4 => filters.push(Arc::new(SigV4Filter::new(
                        Verifier::new(region, spec.clients.iter().cloned()),
                        spec.anonymous.clone(),
                    ))),
                    FilterKind::Blocks => {
                        let Some(c) = cache else { continue };
                        let reader = Arc::new(PingoraOriginReader::new(origin.clone()));
                        let b = Arc::new(BlockFilter::new(c.clone(), reader, spec.bucket.as_str()));
                        blocks.insert(spec.bucket.as_str().to_owned(), b.clone());
                        filters.push(b);
                    }
                }
            }
            all_keys.extend(spec.clients.iter().cloned());
            let route = Route {
                bucket: spec.bucket.clone(),
                origin: origin.clone(),
                clients: spec.clients.iter().map(|(k, _)| k.clone()).collect(),
                filters,
            };
            routes.insert(spec.bucket.as_str().to_owned(), Arc::new(route));
        }
        Self {
            routes,
            hostnames: hostnames.to_vec(),
            any_client: SigV4Filter::new(Verifier::new(region, all_keys), Vec::new()),
            blocks,
        }
    }

    /// The route for a bucket.
    pub fn get(&self, bucket: &str) -> Option<&Arc<Route>> {
        self.routes.get(bucket)
    }

    /// Buckets whose route accepts `access_key`, sorted.
    pub fn buckets_for(&self, access_key: &str) -> Vec<&BucketName> {
        let mut v: Vec<&BucketName> = self
            .routes
            .values()
            .filter(|r| r.clients.contains(access_key))
            .map(|r| &r.bucket)
            .collect();
        v.sort();
        v
    }

    /// Splits a request into bucket and raw key by Host (virtual host) or path.
    pub fn address<'a>(&self, host: Option<&'a str>, path: &'a str) -> Addressed<'a> {
        let path = path.strip_prefix('/').unwrap_or(path);
        if let Some(host) = host {
            let name = host.rsplit_once(':').map_or(host, |(h, p)| {
                if p.bytes().all(|c| c.is_ascii_digit()) {
                    h
                } else {
                    host
                }
            });
            for base in &self.hostnames {
                if let Some(bucket) = name
                    .strip_suffix(base.as_str())
                    .and_then(|b| b.strip_suffix('.'))
                {
                    if !bucket.is_empty() {
                        return Addressed {
                            bucket,
                            raw_key: path,
                        };
                    }
                }
            }
        }
        let (bucket, raw_key) = path.split_once('/').unwrap_or((path, ""));
        Addressed { bucket, raw_key }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable {
        RouteTable::new(
            &[],
            &HashMap::new(),
            None,
            "us-east-1",
            &["s3.local".to_owned()],
        )
    }

    #[test]
    fn path_and_virtual_host() {
        let t = table();
        assert_eq!(
            t.address(Some("127.0.0.1:9000"), "/warehouse/a/b%20c"),
            Addressed {
                bucket: "warehouse",
                raw_key: "a/b%20c"
            }
        );
        assert_eq!(
            t.address(None, "/warehouse"),
            Addressed {
                bucket: "warehouse",
                raw_key: ""
            }
        );
        assert_eq!(
            t.address(None, "/warehouse/"),
            Addressed {
                bucket: "warehouse",
                raw_key: ""
            }
        );
        assert_eq!(
            t.address(None, "/"),
            Addressed {
                bucket: "",
                raw_key: ""
            }
        );
        assert_eq!(
            t.address(Some("warehouse.s3.local:9000"), "/a/b"),
            Addressed {
                bucket: "warehouse",
                raw_key: "a/b"
            }
        );
        assert_eq!(
            t.address(Some("s3.local"), "/warehouse/k"),
            Addressed {
                bucket: "warehouse",
                raw_key: "k"
            }
        );
    }
}
