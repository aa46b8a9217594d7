//! The route table: which bucket a request addresses (path-style or virtual-host), and the
//! route (origin, client keys, filter chain) that serves it.

pub mod bucket_match;
pub mod patterns;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use floe_core::BucketName;
use floe_filter::plugin::{RouteCx, StartError};
use floe_filter::RequestFilter;

use crate::chain::Plugins;
use crate::config::settings::RouteSpec;
use crate::origin::reader::PingoraOriginReader;
use crate::origin::Origin;
use crate::routes::patterns::PatternRoute;

/// One route, built once from config (for a pattern route: once per bucket it served).
pub struct Route {
    /// The bucket.
    pub bucket: BucketName,
    /// The origin serving it.
    pub origin: Arc<Origin>,
    /// Access keys allowed here.
    pub clients: HashSet<String>,
    /// Filter stages, in order.
    pub filters: Vec<Arc<dyn RequestFilter>>,
    /// Bucket-level operations are carried to the origin.
    pub bucket_operations: bool,
}

impl Route {
    /// Builds `spec`'s stages for `bucket` from the started plugins.
    pub fn build(
        spec: &RouteSpec,
        bucket: &BucketName,
        origin: &Arc<Origin>,
        plugins: &Plugins,
        region: &str,
    ) -> Result<Self, StartError> {
        let mut cx = RouteCx {
            bucket: Some(bucket),
            route: spec.bucket.as_str(),
            region,
            clients: &spec.clients,
            anonymous: &spec.anonymous,
            origin: Some(Arc::new(PingoraOriginReader::new(origin.clone()))),
            later: &[],
            shared: plugins.shared(),
        };
        let mut filters = Vec::with_capacity(spec.filters.len());
        for (i, name) in spec.filters.iter().enumerate() {
            cx.later = spec.filters.get(i + 1..).unwrap_or_default();
            let stage = plugins
                .build(name, &cx)
                .map_err(|e| format!("route {}: {e}", spec.bucket))?;
            filters.push(stage);
            if let Some(inner) = cx.origin.take() {
                cx.origin = Some(plugins.origin_layer(name, &cx, inner));
            }
        }
        Ok(Self {
            bucket: bucket.clone(),
            origin: origin.clone(),
            clients: spec.clients.iter().map(|(k, _)| k.clone()).collect(),
            filters,
            bucket_operations: spec.bucket_operations,
        })
    }
}

/// What a request addresses, from its Host and path.
#[derive(Debug, PartialEq, Eq)]
pub struct Addressed<'a> {
    /// The bucket name as text (validated later against the table), empty for the service.
    pub bucket: &'a str,
    /// The raw, still percent-encoded key path (no leading '/'), empty when none.
    pub raw_key: &'a str,
}

/// Routes by bucket name, then by pattern, plus a verifier over every client key (for
/// ListBuckets and for authenticating requests to unknown buckets before saying NoSuchBucket).
pub struct RouteTable {
    routes: HashMap<String, Arc<Route>>,
    patterns: Vec<PatternRoute>,
    hostnames: Vec<String>,
    /// The authentication stage over all client keys.
    pub any_client: Arc<dyn RequestFilter>,
    /// Origins' bucket lists (ListBuckets).
    pub origin_buckets: crate::modes::bucket_list::OriginBuckets,
}

impl RouteTable {
    /// Builds the table: each named route's stages, by name, from the started plugins (a
    /// pattern route's, per bucket, when a request first names it). `origins` must hold
    /// every origin the specs name.
    pub fn new(
        specs: &[RouteSpec],
        origins: &HashMap<String, Arc<Origin>>,
        plugins: &Plugins,
        region: &str,
        hostnames: &[String],
    ) -> Result<Self, StartError> {
        let mut routes = HashMap::new();
        let mut patterns = Vec::new();
        let mut all_keys = Vec::new();
        for spec in specs {
            let Some(origin) = origins.get(&spec.origin) else {
                continue;
            };
            all_keys.extend(spec.clients.iter().cloned());
            match spec.bucket.name() {
                Some(name) => {
                    let route = Route::build(spec, name, origin, plugins, region)?;
                    routes.insert(name.as_str().to_owned(), Arc::new(route));
                }
                None => patterns.push(PatternRoute::new(spec, origin, plugins, region)),
            }
        }
        let any_client = plugins.authenticator(&RouteCx {
            bucket: None,
            route: "",
            region,
            clients: &all_keys,
            anonymous: &[],
            origin: None,
            later: &[],
            shared: plugins.shared(),
        })?;
        Ok(Self {
            routes,
            patterns,
            hostnames: hostnames.to_vec(),
            any_client,
            origin_buckets: Default::default(),
        })
    }

    /// The route for a bucket: the route naming it, else the first pattern matching it
    /// (built for it on first use). A pattern route whose stages cannot be built for the
    /// bucket is an error.
    pub fn get(&self, bucket: &str) -> Result<Option<Arc<Route>>, StartError> {
        if bucket.is_empty() {
            return Ok(None); // the service (ListBuckets): no pattern, not even `*`, names it
        }
        if let Some(r) = self.routes.get(bucket) {
            return Ok(Some(r.clone()));
        }
        match self.patterns.iter().find(|p| p.matches(bucket)) {
            Some(p) => p.route(bucket).map(Some),
            None => Ok(None),
        }
    }

    /// The caller's routed buckets that exist at their origins, with the origins' creation
    /// dates, sorted by name: each named route's bucket, and the origin's buckets a pattern
    /// route serves (those no earlier route claims). An origin that cannot be asked fails
    /// the listing (a list that names missing buckets, or drops existing ones, misleads the
    /// tools that walk it).
    pub async fn listed_buckets(
        &self,
        access_key: &str,
    ) -> Result<Vec<(BucketName, String)>, String> {
        let mut out = Vec::new();
        for r in self
            .routes
            .values()
            .filter(|r| r.clients.contains(access_key))
        {
            let at_origin = self.origin_buckets.of(&r.origin).await?;
            if let Some((_, date)) = at_origin.iter().find(|(n, _)| n == r.bucket.as_str()) {
                out.push((r.bucket.clone(), date.clone()));
            }
        }
        for (i, p) in self.patterns.iter().enumerate() {
            if !p.accepts(access_key) {
                continue;
            }
            for (name, date) in self.origin_buckets.of(p.origin()).await?.iter() {
                let first = self.patterns.iter().position(|q| q.matches(name));
                if !self.routes.contains_key(name) && first == Some(i) {
                    if let Ok(b) = BucketName::parse(name) {
                        out.push((b, date.clone()));
                    }
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
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
        let cx = floe_core::config::ConfigCx {
            file: "t.yaml",
            env: &|_| None,
        };
        let configured =
            crate::chain::configure(&cx, "{}", &[], &crate::chain::factories()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let plugins = rt.block_on(crate::chain::start(configured)).unwrap();
        RouteTable::new(
            &[],
            &HashMap::new(),
            &plugins,
            "us-east-1",
            &["s3.local".to_owned()],
        )
        .unwrap()
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
