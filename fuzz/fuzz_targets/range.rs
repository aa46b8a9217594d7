//! Range headers against any object size: a satisfiable range never yields a byte outside the
//! object, and `bytes=a-b` the client wrote is honoured exactly when it fits.
#![no_main]

use floe_core::range::{resolve, RangeAsk};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, u64, u32, u32)| {
    let (header, size, a, b) = input;
    for h in [
        header.clone(),
        format!("bytes={a}-{b}"),
        format!("bytes=-{b}"),
        format!("bytes={a}-"),
    ] {
        if let RangeAsk::Part { first, last } = resolve(Some(&h), size) {
            assert!(
                first <= last && last < size,
                "{h:?} over {size} gave {first}-{last}"
            );
        }
    }
    if size > 0 && (a as u64) <= (b as u64) && (b as u64) < size {
        assert_eq!(
            resolve(Some(&format!("bytes={a}-{b}")), size),
            RangeAsk::Part {
                first: a as u64,
                last: b as u64
            }
        );
    }
});
