//! The configuration S3 keeps beside an object (`?tagging`, `?acl`, `?retention`,
//! `?legal-hold`, ...) or a bucket (`?lifecycle`, `?policy`, `?cors`, `?object-lock`, ...).
//! Floe implements none of it: a request naming one of these sub-resources is a
//! [`crate::op::S3Op::Config`] operation, verified and re-signed like any other and carried to
//! the origin uncached (bucket configuration only on routes with `bucket_operations: true`).
//! A sub-resource Floe does not carry (S3's analytics, metrics, inventory and
//! intelligent-tiering configurations, which MinIO and Ceph lack too) stays 501.
//!
//! ```
//! use floe_core::subresource::ConfigOp;
//! let op = ConfigOp::classify(true, "PUT", "tagging&versionId=3").unwrap().unwrap();
//! assert_eq!(op.name(), "PutObjectTagging");
//! assert!(op.changes_object_answers() && !op.is_read());
//! assert!(ConfigOp::classify(true, "POST", "tagging").unwrap().is_none()); // no such operation
//! assert!(ConfigOp::classify(true, "GET", "x-id=GetObject").is_none()); // no sub-resource
//! ```

/// One sub-resource: its query name and S3's name of the operation each method is
/// (GET, PUT, DELETE, POST).
struct Sub {
    query: &'static str,
    ops: [Option<&'static str>; 4],
}

const fn sub(query: &'static str, ops: [Option<&'static str>; 4]) -> Sub {
    Sub { query, ops }
}

/// An object's sub-resources.
const OBJECT: &[Sub] = &[
    sub(
        "tagging",
        [
            Some("GetObjectTagging"),
            Some("PutObjectTagging"),
            Some("DeleteObjectTagging"),
            None,
        ],
    ),
    sub(
        "acl",
        [Some("GetObjectAcl"), Some("PutObjectAcl"), None, None],
    ),
    sub(
        "retention",
        [
            Some("GetObjectRetention"),
            Some("PutObjectRetention"),
            None,
            None,
        ],
    ),
    sub(
        "legal-hold",
        [
            Some("GetObjectLegalHold"),
            Some("PutObjectLegalHold"),
            None,
            None,
        ],
    ),
    sub("torrent", [Some("GetObjectTorrent"), None, None, None]),
    sub("restore", [None, None, None, Some("RestoreObject")]),
    sub("select", [None, None, None, Some("SelectObjectContent")]),
];

/// A bucket's sub-resources (versioning and location are operations of their own).
const BUCKET: &[Sub] = &[
    sub(
        "acl",
        [Some("GetBucketAcl"), Some("PutBucketAcl"), None, None],
    ),
    sub(
        "policy",
        [
            Some("GetBucketPolicy"),
            Some("PutBucketPolicy"),
            Some("DeleteBucketPolicy"),
            None,
        ],
    ),
    sub(
        "policyStatus",
        [Some("GetBucketPolicyStatus"), None, None, None],
    ),
    sub(
        "lifecycle",
        [
            Some("GetBucketLifecycleConfiguration"),
            Some("PutBucketLifecycleConfiguration"),
            Some("DeleteBucketLifecycle"),
            None,
        ],
    ),
    sub(
        "cors",
        [
            Some("GetBucketCors"),
            Some("PutBucketCors"),
            Some("DeleteBucketCors"),
            None,
        ],
    ),
    sub(
        "tagging",
        [
            Some("GetBucketTagging"),
            Some("PutBucketTagging"),
            Some("DeleteBucketTagging"),
            None,
        ],
    ),
    sub(
        "website",
        [
            Some("GetBucketWebsite"),
            Some("PutBucketWebsite"),
            Some("DeleteBucketWebsite"),
            None,
        ],
    ),
    sub(
        "logging",
        [
            Some("GetBucketLogging"),
            Some("PutBucketLogging"),
            None,
            None,
        ],
    ),
    sub(
        "notification",
        [
            Some("GetBucketNotificationConfiguration"),
            Some("PutBucketNotificationConfiguration"),
            None,
            None,
        ],
    ),
    sub(
        "replication",
        [
            Some("GetBucketReplication"),
            Some("PutBucketReplication"),
            Some("DeleteBucketReplication"),
            None,
        ],
    ),
    sub(
        "encryption",
        [
            Some("GetBucketEncryption"),
            Some("PutBucketEncryption"),
            Some("DeleteBucketEncryption"),
            None,
        ],
    ),
    sub(
        "object-lock",
        [
            Some("GetObjectLockConfiguration"),
            Some("PutObjectLockConfiguration"),
            None,
            None,
        ],
    ),
    sub(
        "ownershipControls",
        [
            Some("GetBucketOwnershipControls"),
            Some("PutBucketOwnershipControls"),
            Some("DeleteBucketOwnershipControls"),
            None,
        ],
    ),
    sub(
        "publicAccessBlock",
        [
            Some("GetPublicAccessBlock"),
            Some("PutPublicAccessBlock"),
            Some("DeletePublicAccessBlock"),
            None,
        ],
    ),
    sub(
        "accelerate",
        [
            Some("GetBucketAccelerateConfiguration"),
            Some("PutBucketAccelerateConfiguration"),
            None,
            None,
        ],
    ),
    sub(
        "requestPayment",
        [
            Some("GetBucketRequestPayment"),
            Some("PutBucketRequestPayment"),
            None,
            None,
        ],
    ),
];

/// Bucket sub-resources Floe does not carry: 501 NotImplemented (never a listing).
const BUCKET_NOT_CARRIED: &[&str] = &["analytics", "metrics", "inventory", "intelligent-tiering"];

/// A configuration operation: which sub-resource of an object or a bucket, and which method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigOp {
    on_object: bool,
    sub: u8,
    verb: u8,
}

impl ConfigOp {
    /// The configuration operation a request is: `None` when its query names no
    /// sub-resource; `Some(None)` when it names one this method has no operation on (or one
    /// Floe does not carry).
    pub fn classify(on_object: bool, method: &str, query: &str) -> Option<Option<ConfigOp>> {
        let table = if on_object { OBJECT } else { BUCKET };
        let names = query
            .split('&')
            .map(|kv| kv.split('=').next().unwrap_or(""));
        let mut not_carried = false;
        for name in names {
            if let Some(sub) = table.iter().position(|s| s.query == name) {
                let verb = ["GET", "PUT", "DELETE", "POST"]
                    .iter()
                    .position(|m| *m == method);
                let op = verb
                    .filter(|v| table[sub].ops[*v].is_some())
                    .map(|v| ConfigOp {
                        on_object,
                        sub: sub as u8,
                        verb: v as u8,
                    });
                return Some(op);
            }
            not_carried |= !on_object && BUCKET_NOT_CARRIED.contains(&name);
        }
        not_carried.then_some(None)
    }

    /// Every configuration operation, for config validation and tests.
    pub fn all() -> impl Iterator<Item = ConfigOp> {
        let of = |on_object: bool, table: &'static [Sub]| {
            table.iter().enumerate().flat_map(move |(sub, s)| {
                (0..4u8)
                    .filter(move |v| s.ops[*v as usize].is_some())
                    .map(move |verb| ConfigOp {
                        on_object,
                        sub: sub as u8,
                        verb,
                    })
            })
        };
        of(true, OBJECT).chain(of(false, BUCKET))
    }

    /// S3's name of the operation (`PutObjectTagging`).
    pub fn name(self) -> &'static str {
        let table = if self.on_object { OBJECT } else { BUCKET };
        table
            .get(self.sub as usize)
            .and_then(|s| s.ops.get(self.verb as usize).copied().flatten())
            .unwrap_or("Unsupported")
    }

    /// Whether it configures an object (else a bucket).
    pub fn on_object(self) -> bool {
        self.on_object
    }

    /// Whether it is a GET (safe to retry).
    pub fn is_get(self) -> bool {
        self.verb == 0
    }

    /// Whether it only reads (a GET, or a select query): it changes nothing at the origin.
    pub fn is_read(self) -> bool {
        self.verb == 0 || self.name() == "SelectObjectContent"
    }

    /// Whether it may change what a GET or HEAD of the object answers (its tag count,
    /// retention, legal hold, restore status): a cache drops what it holds of the key.
    pub fn changes_object_answers(self) -> bool {
        self.on_object && !self.is_read()
    }

    /// Whether it may change what a GET or HEAD of any object of the bucket answers (a
    /// lifecycle rule's `x-amz-expiration`): a cache drops what it holds of the bucket.
    pub fn changes_bucket_answers(self) -> bool {
        !self.on_object && !self.is_read() && BUCKET[self.sub as usize].query == "lifecycle"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_round_trips_through_its_name_and_query() {
        let all: Vec<ConfigOp> = ConfigOp::all().collect();
        assert_eq!(all.len(), 52);
        for op in all {
            let table = if op.on_object { OBJECT } else { BUCKET };
            let method = ["GET", "PUT", "DELETE", "POST"][op.verb as usize];
            let query = format!("{}&x-id={}", table[op.sub as usize].query, op.name());
            assert_eq!(
                ConfigOp::classify(op.on_object, method, &query),
                Some(Some(op))
            );
        }
    }

    #[test]
    fn what_is_and_is_not_a_configuration_operation() {
        let c = ConfigOp::classify;
        assert_eq!(c(false, "GET", "list-type=2&prefix=a"), None);
        assert_eq!(c(false, "GET", "analytics"), Some(None));
        assert_eq!(c(false, "GET", "metrics&id=a"), Some(None));
        assert_eq!(c(true, "GET", "analytics"), None);
        assert_eq!(c(true, "DELETE", "acl"), Some(None));
        let lifecycle = c(false, "PUT", "lifecycle").flatten().unwrap();
        assert!(lifecycle.changes_bucket_answers() && !lifecycle.changes_object_answers());
        let policy = c(false, "PUT", "policy").flatten().unwrap();
        assert!(!policy.changes_bucket_answers());
        let select = c(true, "POST", "select&select-type=2").flatten().unwrap();
        assert!(select.is_read() && !select.changes_object_answers());
        let hold = c(true, "PUT", "legal-hold").flatten().unwrap();
        assert!(hold.changes_object_answers() && hold.on_object());
    }
}
