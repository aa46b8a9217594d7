//! HTTP byte ranges as S3 reads them (shared by every stage that answers a GET itself).

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
