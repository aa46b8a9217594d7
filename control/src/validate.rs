//! Turns a [`FileConfig`] into [`Settings`]: URLs parsed, secrets resolved, ranges checked.

use std::time::Duration;

use floe_core::config::ConfigCx as Cx;

use crate::config::{CatalogSection, ConfigError, FileConfig, Node, Settings};

/// An http(s) URL without its trailing slash.
fn url(cx: &Cx<'_>, key: &str, v: &str) -> Result<String, ConfigError> {
    let u = url::Url::parse(v).map_err(|e| cx.err(key, format!("{v:?}: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(cx.err(key, format!("{v:?}: scheme must be http or https")));
    }
    Ok(v.trim_end_matches('/').to_owned())
}

/// The catalog client's properties and the poll interval.
fn catalog(cx: &Cx<'_>, c: &CatalogSection) -> Result<(Vec<(String, String)>, u64), ConfigError> {
    let mut props = vec![("uri".to_owned(), url(cx, "catalog.uri", &c.uri)?)];
    if let Some(w) = &c.warehouse {
        props.push(("warehouse".into(), w.clone()));
    }
    let auth = [c.token.is_some(), c.token_env.is_some(), c.oauth2.is_some()];
    if auth.iter().filter(|x| **x).count() > 1 {
        return Err(cx.err("catalog", "give at most one of token, token_env, oauth2"));
    }
    if let Some(t) = &c.token {
        props.push(("token".into(), t.clone()));
    }
    if let Some(v) = &c.token_env {
        props.push(("token".into(), cx.secret_env("catalog.token_env", v)?));
    }
    if let Some(o) = &c.oauth2 {
        let secret = cx.secret_env("catalog.oauth2.client_secret_env", &o.client_secret_env)?;
        props.push(("credential".into(), format!("{}:{secret}", o.client_id)));
        if let Some(u) = &o.server_uri {
            props.push((
                "oauth2-server-uri".into(),
                url(cx, "catalog.oauth2.server_uri", u)?,
            ));
        }
        if let Some(s) = &o.scope {
            props.push(("scope".into(), s.clone()));
        }
    }
    if !(100..=3_600_000).contains(&c.poll_interval_ms) {
        return Err(cx.err(
            "catalog.poll_interval_ms",
            "must be between 100 and 3600000",
        ));
    }
    Ok((props, c.poll_interval_ms))
}

/// Parses and validates config text (the contents of `file`); `env` resolves environment
/// variables.
pub fn parse(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigError> {
    let cx = Cx { file, env };
    let c: FileConfig =
        serde_saphyr::from_str(text).map_err(|e| cx.err("(yaml)", e.to_string()))?;
    let (props, poll) = match &c.catalog {
        Some(cat) => catalog(&cx, cat)?,
        None if c.scheduler.is_none() => {
            return Err(cx.err("catalog", "give a catalog to follow, a scheduler, or both"))
        }
        None => (Vec::new(), 5000),
    };
    let mut follow = Vec::new();
    for (i, f) in c.follow.iter().enumerate() {
        let ns: Vec<String> = f.namespace.split('.').map(str::to_owned).collect();
        if ns.iter().any(String::is_empty) {
            return Err(cx.err(format!("follow[{i}].namespace"), "empty namespace part"));
        }
        follow.push((ns, f.tables.clone()));
    }
    if c.catalog.is_some() && c.nodes.is_empty() {
        return Err(cx.err("nodes", "list at least one Floe node's admin endpoint"));
    }
    let mut nodes = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let key = format!("nodes[{i}]");
        let token = match (&n.token, &n.token_env) {
            (Some(t), None) => t.clone(),
            (None, Some(v)) => cx.secret_env(&format!("{key}.token_env"), v)?,
            _ => return Err(cx.err(key, "give exactly one of token, token_env")),
        };
        nodes.push(Node {
            admin: url(&cx, &format!("nodes[{i}].admin"), &n.admin)?,
            token,
        });
    }
    if c.warm.concurrency == 0 || c.warm.concurrency > 256 {
        return Err(cx.err("warm.concurrency", "must be 1..=256"));
    }
    if c.warm.bytes_per_sec < (1 << 20) {
        return Err(cx.err("warm.bytes_per_sec", "must be at least 1 MiB/s"));
    }
    if !(4096..=(64 << 20)).contains(&c.warm.footer_bytes) {
        return Err(cx.err("warm.footer_bytes", "must be 4 KiB..=64 MiB"));
    }
    if c.heat.half_life_secs == 0 {
        return Err(cx.err("heat.half_life_secs", "must be positive"));
    }
    let status_address = c
        .status_address
        .parse()
        .map_err(|e| cx.err("status_address", format!("{:?}: {e}", c.status_address)))?;
    let ca_pem = match &c.tls {
        None => None,
        Some(t) => {
            let pem = std::fs::read(&t.ca_file)
                .map_err(|e| cx.err("tls.ca_file", format!("{}: {e}", t.ca_file.display())))?;
            crate::http::trust(&pem)
                .map_err(|e| cx.err("tls.ca_file", format!("{}: {e}", t.ca_file.display())))?;
            Some(pem)
        }
    };
    Ok(Settings {
        ca_pem,
        catalog_props: props,
        poll: Duration::from_millis(poll),
        follows_catalog: c.catalog.is_some(),
        otlp_endpoint: match &c.otlp_endpoint {
            Some(u) => Some(url(&cx, "otlp_endpoint", u)?),
            None => None,
        },
        scheduler: match &c.scheduler {
            Some(sc) => Some(floe_sched::config::validate(
                &cx,
                sc,
                c.catalog.as_ref().map(|k| k.uri.as_str()),
            )?),
            None => None,
        },
        follow,
        nodes,
        warm: c.warm,
        prefetch: c.prefetch,
        heat: c.heat,
        pins: c.pins,
        status_address,
        fleet_poll_ms: c.fleet_poll_ms.clamp(100, 3_600_000),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
catalog: { uri: 'http://127.0.0.1:8181/' }
nodes: [ { admin: 'http://127.0.0.1:9101', token: t } ]
";

    fn parse(text: &str) -> Result<Settings, ConfigError> {
        super::parse("f.yaml", text, &|v| (v == "SET").then(|| "s".to_owned()))
    }

    #[test]
    fn a_ca_file_must_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.pem");
        let e = parse(&format!("{GOOD}tls: {{ca_file: {}}}\n", missing.display())).unwrap_err();
        assert_eq!(e.key, "tls.ca_file");
        assert!(e.reason.contains("none.pem"), "{e}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = parse(&format!("{GOOD}tls: {{ca_file: {}}}\n", junk.display())).unwrap_err();
        assert_eq!(e.key, "tls.ca_file");
        assert!(parse(GOOD).unwrap().ca_pem.is_none());
        let e = parse(&format!("{GOOD}tls: {{cafile: x}}\n")).unwrap_err();
        assert_eq!(e.key, "(yaml)");
    }

    #[test]
    fn defaults_are_filled() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.poll, Duration::from_secs(5));
        assert_eq!(s.catalog_props[0].1, "http://127.0.0.1:8181");
        assert_eq!(s.warm.concurrency, 8);
        assert!(s.prefetch.enabled);
        assert_eq!(s.status_address.port(), 9102);
    }

    #[test]
    fn shipped_config_loads() {
        let s = parse(include_str!("../../conf/control.yaml")).unwrap();
        assert_eq!(s.nodes[0].admin, "http://127.0.0.1:9101");
        assert_eq!(s.follow[0].0, vec!["warehouse".to_owned()]);
        assert_eq!(s.prefetch.purge_after_ms, None);
    }

    #[test]
    fn wrong_key_is_named() {
        let e = parse(include_str!("../../conf/testdata/control-wrongkey.yaml")).unwrap_err();
        assert_eq!(e.file, "f.yaml");
        assert!(e.reason.contains("poll_interval"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (
                GOOD.replace("http://127.0.0.1:8181/", "ftp://x"),
                "catalog.uri",
            ),
            (
                GOOD.replace("token: t", "token_env: UNSET"),
                "nodes[0].token_env",
            ),
            (GOOD.replace("token: t", "admin2: x"), "(yaml)"),
            (
                format!("{GOOD}warm: {{ concurrency: 0 }}"),
                "warm.concurrency",
            ),
            (format!("{GOOD}status_address: nowhere"), "status_address"),
            (
                format!("{GOOD}follow: [ {{ namespace: 'a..b' }} ]"),
                "follow[0].namespace",
            ),
            (
                GOOD.replace("8181/' }", "8181', token: a, token_env: SET }"),
                "catalog",
            ),
        ];
        for (text, key) in cases {
            assert_eq!(parse(&text).unwrap_err().key, key, "{text}");
        }
    }

    #[test]
    fn oauth2_becomes_a_credential() {
        let t = GOOD.replace(
            "8181/' }",
            "8181', oauth2: { client_id: c, client_secret_env: SET, scope: x } }",
        );
        let s = parse(&t).unwrap();
        assert!(s
            .catalog_props
            .contains(&("credential".into(), "c:s".into())));
        assert!(s.catalog_props.contains(&("scope".into(), "x".into())));
    }
}
