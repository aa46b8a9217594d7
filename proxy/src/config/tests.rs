//! Config validation: the shipped configs load, broken ones name file, key and reason.

use super::settings::{parse, ConfigError};

const BASE: &str = "server:\n  listeners:\n    - address: 127.0.0.1:9000\n";

fn env(name: &str) -> Option<String> {
    match name {
        "SET" => Some("value".into()),
        "FLOE_ORIGIN_ACCESS_KEY_ID"
        | "FLOE_ORIGIN_SECRET_ACCESS_KEY"
        | "FLOE_CLIENT_TRINO_SECRET" => Some("x".into()),
        _ => None,
    }
}

fn fails(yaml: &str) -> ConfigError {
    match parse("test.yaml", yaml, &env) {
        Ok(_) => panic!("config should have failed:\n{yaml}"),
        Err(e) => e,
    }
}

fn with(rest: &str) -> String {
    format!("{BASE}{rest}")
}

#[test]
fn shipped_configs_load() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/");
    let q = std::fs::read_to_string(format!("{root}quickstart.yaml")).unwrap();
    let s = parse("quickstart.yaml", &q, &env).unwrap();
    assert_eq!(s.routes[0].bucket.as_str(), "warehouse");
    assert_eq!(s.server.threads, 2);
    let ex = std::fs::read_to_string(format!("{root}example.yaml")).unwrap();
    // example.yaml names a secret file that does not exist here: the error must say so.
    let e = parse("example.yaml", &ex, &env).unwrap_err();
    assert_eq!(e.key, "routes[0].clients[1].secret_key_file");
    assert!(e.reason.contains("/etc/floe/duckdb.secret"));
}

#[test]
fn wrongkey_fixture_names_file_key_and_reason() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../conf/testdata/wrongkey.yaml"
    );
    let e = super::settings::load(std::path::Path::new(path)).unwrap_err();
    assert!(e.file.ends_with("wrongkey.yaml"));
    assert!(e.to_string().contains("endpont"), "{e}");
}

#[test]
fn bad_values_are_named() {
    let origin = "origins:\n  o:\n    endpoint: http://127.0.0.1:1\n";
    let e = fails(&with("origins:\n  o:\n    endpoint: not a url\nroutes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n"));
    assert_eq!(e.key, "origins.o.endpoint");
    let e = fails(&with(&format!("{origin}routes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n  - bucket: abc\n    origin: o\n    anonymous: true\n")));
    assert_eq!(
        (e.key.as_str(), e.reason.contains("twice")),
        ("routes[1].bucket", true)
    );
    let e = fails(&with(&format!("{origin}routes:\n  - bucket: abc\n    origin: o\n    clients:\n      - access_key: a\n        secret_key_env: UNSET\n")));
    assert_eq!(e.key, "routes[0].clients[0].secret_key_env");
    assert!(e.reason.contains("UNSET"));
    let e = fails(&with(&format!(
        "{origin}routes:\n  - bucket: abc\n    origin: o\n    clients:\n      - access_key: a\n"
    )));
    assert!(e.reason.contains("missing secret"));
    let e = fails(&with(&format!(
        "{origin}routes:\n  - bucket: abc\n    origin: nope\n    anonymous: true\n"
    )));
    assert_eq!(e.key, "routes[0].origin");
    let e = fails(&with(&format!(
        "{origin}routes:\n  - bucket: Bad_Name\n    origin: o\n    anonymous: true\n"
    )));
    assert_eq!(e.key, "routes[0].bucket");
    let e = fails(&with(&format!(
        "{origin}routes:\n  - bucket: 'Team-*'\n    origin: o\n    anonymous: true\n"
    )));
    assert_eq!(
        (
            e.key.as_str(),
            e.reason.contains("'T' cannot be in a bucket pattern")
        ),
        ("routes[0].bucket", true)
    );
    let e = fails(&with(&format!(
        "{origin}routes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n    bucket_operation: true\n"
    )));
    assert!(e.to_string().contains("bucket_operation"), "{e}");
    let e = fails(&with(&format!("{origin}routes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n    filters: [sigv4, nope]\n")));
    assert_eq!(e.key, "routes[0].filters[1]");
    let e = fails(&with(&format!(
        "{origin}routes:\n  - bucket: abc\n    origin: o\n"
    )));
    assert_eq!(e.key, "routes[0].clients");
    let e = fails("server:\n  listeners: []\nroutes: []\n");
    assert_eq!(e.key, "server.listeners");
}

#[test]
fn anonymous_is_read_only_unless_operations_are_listed() {
    use floe_core::S3Op;
    let route = |anon: &str| {
        with(&format!(
            "origins:\n  o:\n    endpoint: http://127.0.0.1:1\nroutes:\n  - bucket: abc\n    origin: o\n    anonymous: {anon}\n"
        ))
    };
    let s = parse("t.yaml", &route("true"), &env).unwrap();
    assert_eq!(s.routes[0].anonymous, S3Op::ANONYMOUS_READ.to_vec());
    assert!(!s.routes[0].anonymous.contains(&S3Op::PutObject));
    let s = parse(
        "t.yaml",
        &route("{operations: [GetObject, PutObject]}"),
        &env,
    )
    .unwrap();
    assert_eq!(
        s.routes[0].anonymous,
        vec![S3Op::GetObject, S3Op::PutObject]
    );
    let e = fails(&route("{operations: [GetObject, Putobject]}"));
    assert_eq!(e.key, "routes[0].anonymous.operations[1]");
    assert!(
        e.reason.contains("\"Putobject\"") && e.reason.contains("PutObject"),
        "{e}"
    );
    let e = fails(&route("{operations: []}"));
    assert_eq!(e.key, "routes[0].anonymous.operations");
    let e = fails(&route("{operations: [ListBuckets]}"));
    assert_eq!(e.key, "routes[0].anonymous.operations[0]");
    assert_eq!(fails(&route("{ops: [GetObject]}")).key, "(yaml)");
}

#[test]
fn secrets_from_env_and_credentials() {
    let y = with("origins:\n  o:\n    endpoint: https://s3.example.com\n    credentials:\n      from: env\n      access_key_env: SET\n      secret_key_env: SET\nroutes:\n  - bucket: abc\n    origin: o\n    clients:\n      - access_key: a\n        secret_key_env: SET\n");
    let s = parse("t.yaml", &y, &env).unwrap();
    assert_eq!(
        s.routes[0].clients,
        vec![("a".to_owned(), "value".to_owned())]
    );
    assert_eq!(
        s.origins["o"].credentials,
        Some(("value".to_owned(), "value".to_owned()))
    );
    let bad = y.replace("from: env", "from: vault");
    assert_eq!(fails(&bad).key, "(yaml)");
}

#[test]
fn blocks_need_a_cache_section_with_sane_sizes() {
    let origin = "origins:\n  o:\n    endpoint: http://127.0.0.1:1\n";
    let route = "routes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n    filters: [sigv4, blocks]\n";
    let e = fails(&with(&format!("{origin}{route}")));
    assert_eq!(e.key, "routes[0].filters");
    let cache = |bb: u64, disk: u64| {
        format!("cache:\n  dir: /tmp/x\n  block_bytes: {bb}\n  data: {{dram_bytes: 8388608, disk_bytes: {disk}}}\n  metadata: {{dram_bytes: 8388608, disk_bytes: 67108864}}\n")
    };
    assert_eq!(
        fails(&with(&format!("{origin}{route}{}", cache(512, 67108864)))).key,
        "cache.block_bytes"
    );
    assert_eq!(
        fails(&with(&format!("{origin}{route}{}", cache(2097152, 1000)))).key,
        "cache.data.disk_bytes"
    );
    let s = parse(
        "t.yaml",
        &with(&format!("{origin}{route}{}", cache(2097152, 67108864))),
        &env,
    )
    .unwrap();
    let blocks = format!("{:?}", s.plugins);
    assert!(blocks.contains("block_bytes: 2097152"), "{blocks}");
    assert!(
        blocks.contains("populate_dram: true"),
        "the default: {blocks}"
    );
    let off = format!("{}  populate_dram: false\n", cache(2097152, 67108864));
    let s = parse("t.yaml", &with(&format!("{origin}{route}{off}")), &env).unwrap();
    assert!(format!("{:?}", s.plugins).contains("populate_dram: false"));
    let bad = format!("{}  populate_dram: sometimes\n", cache(2097152, 67108864));
    let e = fails(&with(&format!("{origin}{route}{bad}")));
    assert!(
        e.to_string().contains("populate_dram"),
        "a bad value is named: {e}"
    );
}

#[test]
fn route_shares_are_carved_out_of_the_data_store_and_checked() {
    let origin = "origins:\n  o:\n    endpoint: http://127.0.0.1:1\n";
    let route = "routes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n    filters: [sigv4, blocks]\n";
    let cache = |shares: &str| {
        format!("{origin}{route}cache:\n  dir: /tmp/x\n  data: {{dram_bytes: 33554432, disk_bytes: 268435456}}\n  metadata: {{dram_bytes: 8388608, disk_bytes: 67108864}}\n  shares:\n{shares}")
    };
    let share = |bucket: &str, dram: u64, disk: u64| {
        format!("    - {{bucket: {bucket}, dram_bytes: {dram}, disk_bytes: {disk}}}\n")
    };
    let s = parse(
        "t.yaml",
        &with(&cache(&share("abc", 8 << 20, 64 << 20))),
        &env,
    )
    .unwrap();
    let blocks = format!("{:?}", s.plugins);
    // The data store keeps what the share leaves: 24 MiB of DRAM, 192 MiB of disk.
    assert!(
        blocks.contains("dram_bytes: 25165824") && blocks.contains("disk_bytes: 201326592"),
        "{blocks}"
    );
    assert!(blocks.contains("shares/abc"), "{blocks}");
    for (shares, key, why) in [
        (
            share("abc", 1000, 64 << 20),
            "cache.shares[0].dram_bytes",
            "at least one block",
        ),
        (
            share("abc", 8 << 20, 1000),
            "cache.shares[0].disk_bytes",
            "four disk regions",
        ),
        (
            share("abc", 32 << 20, 64 << 20),
            "cache.shares[0].bucket",
            "leave the other routes",
        ),
        (
            share("abc", 40 << 20, 64 << 20),
            "cache.shares[0].bucket",
            "more than cache.data",
        ),
        (
            share("abc", 2 << 20, 64 << 20) + &share("abc", 2 << 20, 64 << 20),
            "cache.shares[1].bucket",
            "has a share already",
        ),
        (
            share("Bad_Name", 2 << 20, 64 << 20),
            "cache.shares[0].bucket",
            "not a bucket name",
        ),
    ] {
        let e = fails(&with(&cache(&shares)));
        assert_eq!(e.key, key, "{shares}");
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
fn catalog_route_is_validated() {
    let r = "origins:\n  o:\n    endpoint: http://127.0.0.1:1\nroutes:\n  - bucket: catalog\n    origin: o\n    anonymous: true\n";
    let e = fails(&with(&format!(
        "{r}catalog: {{upstream: 'http://127.0.0.1:8181'}}\n"
    )));
    assert_eq!(e.key, "catalog.path");
    assert!(e.reason.contains("shadow"), "{e}");
    let e = fails(&with(&format!(
        "{r}catalog: {{upstream: 'ftp://x', path: /rest}}\n"
    )));
    assert_eq!(e.key, "catalog.upstream");
    let e = fails(&with(&format!(
        "{r}catalog: {{upstream: 'http://x', path: /a/b}}\n"
    )));
    assert_eq!(e.key, "catalog.path");
    let ok = parse(
        "t.yaml",
        &with(&format!(
            "{r}catalog: {{upstream: 'https://cat.example/api/', path: /rest}}\n"
        )),
        &env,
    )
    .unwrap();
    let c = ok.catalog.unwrap();
    assert_eq!(
        (c.address.as_str(), c.tls, c.base.as_str()),
        ("cat.example:443", true, "/api")
    );
    assert_eq!(c.ttl.as_secs(), 30);
}

#[test]
fn hedge_settings_are_checked_and_default_to_the_p95_and_five_percent() {
    let route = "routes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n";
    let o = |h: &str| {
        with(&format!(
            "origins:\n  o:\n    endpoint: http://127.0.0.1:1\n    hedge: {h}\n{route}"
        ))
    };
    assert_eq!(
        fails(&o("{percentile: 100}")).key,
        "origins.o.hedge.percentile"
    );
    assert_eq!(
        fails(&o("{max_share: 0.9}")).key,
        "origins.o.hedge.max_share"
    );
    assert_eq!(fails(&o("{after_ms: 0}")).key, "origins.o.hedge.after_ms");
    assert!(fails(&o("{percentil: 95}"))
        .to_string()
        .contains("percentil"));
    let s = parse("test.yaml", &o("{}"), &env).unwrap();
    let h = s.origins["o"].hedge.unwrap();
    assert_eq!((h.after, h.quantile, h.max_share), (None, 0.95, 0.05));
    let s = parse(
        "test.yaml",
        &with(&format!(
            "origins:\n  o:\n    endpoint: http://127.0.0.1:1\n{route}"
        )),
        &env,
    )
    .unwrap();
    assert!(s.origins["o"].hedge.is_none(), "off unless set");
}

#[test]
fn a_write_buffer_past_its_bound_is_named() {
    let rest = "origins:\n  o:\n    endpoint: http://127.0.0.1:1\nroutes:\n  - bucket: abc\n    origin: o\n    anonymous: true\n";
    let server = |extra: &str| format!("{BASE}{extra}{rest}");
    let ok = parse("test.yaml", &server(""), &env).unwrap();
    assert_eq!(ok.server.write_buffer_bytes, 16 << 10);
    let e = fails(&server("  write_buffer_bytes: 67108864\n"));
    assert_eq!(
        (e.file.as_str(), e.key.as_str()),
        ("test.yaml", "server.write_buffer_bytes")
    );
    assert!(e.reason.contains("67108864"), "{}", e.reason);
    let none = parse("test.yaml", &server("  write_buffer_bytes: 0\n"), &env).unwrap();
    assert_eq!(none.server.write_buffer_bytes, 0);
}
