//! HTTP byte ranges as S3 reads them, and block arithmetic.

/// What a Range header asks for, against an object of known size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAsk {
    /// No (usable) Range header: the whole object, 200.
    Whole,
    /// Bytes `first..=last`, 206.
    Part {
        /// First byte.
        first: u64,
        /// Last byte, inclusive.
        last: u64,
    },
    /// Not satisfiable: 416 InvalidRange.
    Unsatisfiable,
    /// Several ranges: not served from cache.
    Multi,
}

/// Resolves a Range header value against `size`, as S3 does: a malformed header is ignored
/// (whole object), a suffix longer than the object is the whole object as 206.
pub fn resolve(header: Option<&str>, size: u64) -> RangeAsk {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return RangeAsk::Whole;
    };
    if spec.contains(',') {
        return RangeAsk::Multi;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeAsk::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Err(_), Ok(n)) if a.is_empty() => {
            if n == 0 || size == 0 {
                RangeAsk::Unsatisfiable
            } else {
                RangeAsk::Part {
                    first: size.saturating_sub(n),
                    last: size - 1,
                }
            }
        }
        (Ok(first), Err(_)) if b.is_empty() => {
            if first >= size {
                RangeAsk::Unsatisfiable
            } else {
                RangeAsk::Part {
                    first,
                    last: size - 1,
                }
            }
        }
        (Ok(first), Ok(last)) if first <= last => {
            if first >= size {
                RangeAsk::Unsatisfiable
            } else {
                RangeAsk::Part {
                    first,
                    last: last.min(size - 1),
                }
            }
        }
        _ => RangeAsk::Whole,
    }
}

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
    fn s3_range_forms() {
        assert_eq!(resolve(None, 10), RangeAsk::Whole);
        assert_eq!(
            resolve(Some("bytes=0-4"), 10),
            RangeAsk::Part { first: 0, last: 4 }
        );
        assert_eq!(
            resolve(Some("bytes=5-"), 10),
            RangeAsk::Part { first: 5, last: 9 }
        );
        assert_eq!(
            resolve(Some("bytes=-3"), 10),
            RangeAsk::Part { first: 7, last: 9 }
        );
        assert_eq!(
            resolve(Some("bytes=-30"), 10),
            RangeAsk::Part { first: 0, last: 9 }
        );
        assert_eq!(
            resolve(Some("bytes=8-100"), 10),
            RangeAsk::Part { first: 8, last: 9 }
        );
        assert_eq!(resolve(Some("bytes=10-"), 10), RangeAsk::Unsatisfiable);
        assert_eq!(resolve(Some("bytes=-0"), 10), RangeAsk::Unsatisfiable);
        assert_eq!(resolve(Some("bytes=5-2"), 10), RangeAsk::Whole);
        assert_eq!(resolve(Some("items=0-1"), 10), RangeAsk::Whole);
        assert_eq!(resolve(Some("bytes=0-1,4-5"), 10), RangeAsk::Multi);
    }

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
