//! The YAML config loaders of both binaries (floe-proxy with every plugin's section, and
//! floe-control with its scheduler): any text is loaded or refused without a panic, the same
//! text always gets the same answer, and every refusal names the file and a key.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Every environment variable a config names is set (secrets resolve), except `UNSET_*`.
fn env(name: &str) -> Option<String> {
    (!name.starts_with("UNSET_")).then(|| format!("fuzz-{name}"))
}

fn check<T>(file: &str, got: Result<T, floe_core::config::ConfigError>) -> Option<String> {
    let e = got.err()?;
    assert_eq!(e.file, file, "an error names another file: {e}");
    assert!(!e.key.is_empty(), "an error names no key: {e}");
    assert!(!e.reason.is_empty(), "an error gives no reason: {e}");
    Some(e.to_string())
}

fuzz_target!(|text: &str| {
    let proxy = |t: &str| check("proxy.yaml", floe_proxy::config::settings::parse("proxy.yaml", t, &env));
    let control =
        |t: &str| check("control.yaml", floe_control::config::parse("control.yaml", t, &env));
    assert_eq!(proxy(text), proxy(text), "the proxy's loader is not deterministic");
    assert_eq!(control(text), control(text), "the control plane's loader is not deterministic");
});
