//! The `routes:` section validated: buckets (a name or a pattern), origins, client keys (the
//! secret from exactly one source), anonymous operations, and filter names (each a plugin the
//! chain knows, `sigv4` first).

use std::collections::{BTreeMap, HashMap, HashSet};

use floe_core::config::ConfigCx as Ctx;
use floe_core::S3Op;

use crate::routes::bucket_match::BucketMatch;

use crate::config::file::{AnonymousSection, FileConfig};
use crate::config::settings::{ConfigError, OriginSpec, RouteSpec, AUTH_STAGE};

/// Validates every route against the origins and the plugins' names.
pub fn routes(
    cx: &Ctx<'_>,
    raw: &FileConfig,
    origins: &BTreeMap<String, OriginSpec>,
    plugins: &[&str],
) -> Result<Vec<RouteSpec>, ConfigError> {
    if raw.routes.is_empty() {
        return Err(cx.err("routes", "at least one route is needed"));
    }
    let mut seen = HashSet::new();
    let mut secrets: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        let bucket =
            BucketMatch::parse(&r.bucket).map_err(|e| cx.err(format!("{key}.bucket"), e))?;
        if !seen.insert(bucket.as_str().to_owned()) {
            return Err(cx.err(
                format!("{key}.bucket"),
                format!("bucket {bucket} is routed twice"),
            ));
        }
        if !origins.contains_key(&r.origin) {
            return Err(cx.err(
                format!("{key}.origin"),
                format!("no origin named {:?} under origins", r.origin),
            ));
        }
        let mut clients = Vec::new();
        for (j, c) in r.clients.iter().enumerate() {
            let ck = format!("{key}.clients[{j}]");
            let secret =
                match (&c.secret_key, &c.secret_key_env, &c.secret_key_file) {
                    (Some(s), None, None) if !s.is_empty() => s.clone(),
                    (None, Some(v), None) => cx.secret_env(&format!("{ck}.secret_key_env"), v)?,
                    (None, None, Some(f)) => cx.secret_file(&format!("{ck}.secret_key_file"), f)?,
                    (None, None, None) => return Err(cx.err(
                        format!("{ck}.secret_key"),
                        "missing secret: set one of secret_key, secret_key_env, secret_key_file",
                    )),
                    _ => {
                        return Err(cx.err(
                            &ck,
                            "set exactly one of secret_key, secret_key_env, secret_key_file",
                        ))
                    }
                };
            if c.access_key.is_empty() {
                return Err(cx.err(format!("{ck}.access_key"), "must not be empty"));
            }
            if secrets.get(&c.access_key).is_some_and(|s| *s != secret) {
                return Err(cx.err(
                    &ck,
                    format!(
                        "access key {} has a different secret on another route",
                        c.access_key
                    ),
                ));
            }
            secrets.insert(c.access_key.clone(), secret.clone());
            clients.push((c.access_key.clone(), secret));
        }
        let mut filters = Vec::new();
        for (j, f) in r.filters.iter().enumerate() {
            if !plugins.contains(&f.as_str()) {
                return Err(cx.err(
                    format!("{key}.filters[{j}]"),
                    format!("unknown filter {f:?}; known: {}", plugins.join(", ")),
                ));
            }
            filters.push(f.clone());
        }
        if filters.first().map(String::as_str) != Some(AUTH_STAGE) {
            return Err(cx.err(
                format!("{key}.filters"),
                "sigv4 must be the first filter: every request is verified before anything else",
            ));
        }
        let anonymous = anonymous_ops(cx, &key, &r.anonymous)?;
        if clients.is_empty() && anonymous.is_empty() {
            return Err(cx.err(
                format!("{key}.clients"),
                "a route needs at least one client key pair unless anonymous: true",
            ));
        }
        out.push(RouteSpec {
            bucket,
            origin: r.origin.clone(),
            anonymous,
            clients,
            filters,
            bucket_operations: r.bucket_operations,
        });
    }
    Ok(out)
}

/// The operations `anonymous:` allows: `true` is read-only, a list names them exactly.
fn anonymous_ops(
    cx: &Ctx<'_>,
    route_key: &str,
    section: &AnonymousSection,
) -> Result<Vec<S3Op>, ConfigError> {
    let names = match section {
        AnonymousSection::Flag(false) => return Ok(Vec::new()),
        AnonymousSection::Flag(true) => return Ok(S3Op::ANONYMOUS_READ.to_vec()),
        AnonymousSection::Operations(o) => &o.operations,
    };
    let mut ops = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let Some(op) = S3Op::from_name(name).filter(|op| *op != S3Op::ListBuckets) else {
            let known: Vec<&str> = S3Op::ALL[1..].iter().map(|op| op.as_str()).collect();
            return Err(cx.err(
                format!("{route_key}.anonymous.operations[{i}]"),
                format!(
                    "{name:?} is not a bucket or object operation; known: {}",
                    known.join(", ")
                ),
            ));
        };
        ops.push(op);
    }
    if ops.is_empty() {
        return Err(cx.err(
            format!("{route_key}.anonymous.operations"),
            "list at least one operation, or set anonymous: false",
        ));
    }
    Ok(ops)
}
