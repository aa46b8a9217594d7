//! The DeleteObjects and CompleteMultipartUpload bodies: any bytes parse or are refused
//! without a panic, and keys written as S3 clients write them (entities escaped) read back
//! exactly (print -> parse is the identity).
#![no_main]

use floe_blocks::delete::parse_keys;
use floe_writeback::multipart::parse_complete;
use libfuzzer_sys::fuzz_target;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fuzz_target!(|input: (Vec<u8>, Vec<String>)| {
    let (raw, keys) = input;
    let _ = parse_keys(&raw);
    if let Ok(text) = std::str::from_utf8(&raw) {
        let _ = parse_complete(text);
    }
    // XML 1.0 carries no control characters but tab, newline and carriage return; S3 keys
    // with others need URL encoding, and a parser keeps leading/trailing spaces as written.
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| !c.is_control() && c != '\u{fffe}' && c != '\u{ffff}')
        })
        .collect();
    let body = format!(
        "<Delete>{}</Delete>",
        keys.iter()
            .map(|k| format!("<Object><Key>{}</Key></Object>", escape(k)))
            .collect::<String>()
    );
    assert_eq!(parse_keys(body.as_bytes()), Some(keys), "{body}");
});
