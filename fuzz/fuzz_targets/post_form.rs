//! POST Object forms over any bytes: the multipart prefix parser and the policy checks never
//! panic; a parsed form's file starts inside the body, and parsing is the same on the body
//! read in any two pieces (what more bytes arrive never changes what was already parsed).
#![no_main]

use floe_sigv4::post_form::{boundary, parse};
use floe_sigv4::post_policy::PostRequest;
use floe_sigv4::Verifier;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, Vec<u8>, u16, u64)| {
    let (content_type, body, cut, file_len) = input;
    let _ = boundary(&content_type);
    let b = "floeBoundary";
    let Ok(whole) = parse(&body, b) else {
        return;
    };
    if let Some(form) = &whole {
        assert!(form.data_start <= body.len());
        let verifier = Verifier::new("us-east-1", [("AKID".to_owned(), "secret".to_owned())]);
        let post = PostRequest { form, bucket: "uploads", file_len };
        let _ = verifier.verify_post(&post, 1_800_000_000);
    }
    // A prefix parses to nothing yet or to the same form.
    let cut = (cut as usize).min(body.len());
    if let Ok(Some(early)) = parse(&body[..cut], b) {
        assert_eq!(Some(early), whole);
    }
});
