//! Block arithmetic over HTTP byte ranges; the ranges themselves are `floe_core::range`'s.

pub use floe_core::range::{resolve, RangeAsk};

/// A `bytes=a-b` or `bytes=a-` Range header widened to whole blocks of `block` bytes (the
/// origin clamps the end to the object); other forms as they are (their place is unknown
/// before the size is).
pub fn align(header: &str, block: u64) -> String {
    let Some((a, b)) = header
        .trim()
        .strip_prefix("bytes=")
        .and_then(|s| s.split_once('-'))
    else {
        return header.to_owned();
    };
    match (a.trim().parse::<u64>(), b.trim()) {
        (Ok(a), "") => format!("bytes={}-", a / block * block),
        (Ok(a), b) => match b.parse::<u64>() {
            Ok(b) if a <= b => format!(
                "bytes={}-{}",
                a / block * block,
                (b / block + 1) * block - 1
            ),
            _ => header.to_owned(),
        },
        _ => header.to_owned(),
    }
}

/// Inclusive block indexes covering bytes `first..=last` with blocks of `block` bytes.
pub fn blocks_of(first: u64, last: u64, block: u64) -> (u64, u64) {
    (first / block, last / block)
}

/// The byte span `(start, len)` of block `index` in an object of `size` bytes.
pub fn block_span(index: u64, block: u64, size: u64) -> (u64, u64) {
    let start = index * block;
    (start, block.min(size.saturating_sub(start)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn align_widens_to_blocks() {
        assert_eq!(align("bytes=5-12", 10), "bytes=0-19");
        assert_eq!(align("bytes=10-19", 10), "bytes=10-19");
        assert_eq!(align("bytes=15-", 10), "bytes=10-");
        assert_eq!(align("bytes=-5", 10), "bytes=-5");
        assert_eq!(align("bytes=9-2", 10), "bytes=9-2");
    }

    proptest! {
        #[test]
        fn blocks_cover_exactly(first in 0u64..10_000, len in 1u64..10_000, block in 1u64..3000, extra in 0u64..5000) {
            let size = first + len + extra;
            let last = first + len - 1;
            let (a, b) = blocks_of(first, last, block);
            let (s0, _) = block_span(a, block, size);
            let (s1, l1) = block_span(b, block, size);
            prop_assert!(s0 <= first && first < s0 + block);
            prop_assert!(s1 <= last && last < s1 + l1);
            let total: u64 = (a..=b).map(|i| block_span(i, block, size).1).sum();
            prop_assert!(total >= len && total < len + 2 * block);
        }

        #[test]
        fn resolved_parts_are_inside(size in 1u64..100_000, a in 0u64..200_000, b in 0u64..200_000) {
            for h in [format!("bytes={a}-{b}"), format!("bytes={a}-"), format!("bytes=-{b}")] {
                if let RangeAsk::Part { first, last } = resolve(Some(&h), size) {
                    prop_assert!(first <= last && last < size);
                }
            }
        }
    }
}
