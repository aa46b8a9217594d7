//! A browser form upload's authorisation, as S3 checks it: the form's policy (base64 JSON:
//! an expiration and conditions) signed with SigV4 (`x-amz-signature` = hex HMAC of the
//! base64 policy with the signing key of `x-amz-credential`), then every condition held by
//! the form, and every form field named by a condition.

use base64::Engine as _;
use floe_core::{S3Error, S3ErrorCode};
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::auth::{self, ALGORITHM, SIGV2_REFUSED};
use crate::post_form::Form;
use crate::verify::Verifier;

/// What a form upload is, for the checks: the form, its bucket and its file's length.
pub struct PostRequest<'a> {
    /// The fields before the file.
    pub form: &'a Form,
    /// The bucket the form was posted to.
    pub bucket: &'a str,
    /// The file's length in bytes.
    pub file_len: u64,
}

/// Fields no condition needs to name (S3's list).
fn exempt(name: &str) -> bool {
    matches!(name, "x-amz-signature" | "file" | "policy") || name.starts_with("x-ignore-")
}

impl Verifier {
    /// Verifies a form upload at unix time `now`: `Ok(Some(access key))` when signed and
    /// allowed by its policy, `Ok(None)` when the form carries no signature at all (the
    /// caller decides whether anonymous uploads are allowed).
    pub fn verify_post(&self, post: &PostRequest<'_>, now: i64) -> Result<Option<String>, S3Error> {
        let form = post.form;
        if form.get("awsaccesskeyid").is_some() || form.get("signature").is_some() {
            return Err(S3Error::new(S3ErrorCode::InvalidRequest, SIGV2_REFUSED));
        }
        let (Some(policy), Some(signature)) = (form.get("policy"), form.get("x-amz-signature"))
        else {
            return Ok(None);
        };
        let access_key = self.check_signature(form, policy, signature)?;
        let doc = decode_policy(policy)?;
        check_expiration(&doc, now)?;
        check_conditions(&doc, post)?;
        Ok(Some(access_key))
    }

    fn check_signature(
        &self,
        form: &Form,
        policy: &str,
        signature: &str,
    ) -> Result<String, S3Error> {
        let field = |name: &str| {
            form.get(name).ok_or_else(|| {
                S3Error::new(
                    S3ErrorCode::InvalidArgument,
                    format!("Bucket POST must contain a field named '{name}'.  If it is specified, please check the order of the fields."),
                )
            })
        };
        if field("x-amz-algorithm")? != ALGORITHM {
            return Err(S3Error::new(
                S3ErrorCode::InvalidArgument,
                format!("x-amz-algorithm only supports \"{ALGORITHM}\""),
            ));
        }
        let bad = |m: String| S3Error::new(S3ErrorCode::InvalidArgument, m);
        let [access_key, date, region, service] =
            auth::parse_credential(field("x-amz-credential")?, bad)?;
        if !field("x-amz-date")?.starts_with(&date) {
            return Err(bad("x-amz-date does not match the credential's date".into()));
        }
        if region != self.region() {
            return Err(bad(format!(
                "the region '{region}' is wrong; expecting '{}'",
                self.region()
            )));
        }
        let secret = self.secret(&access_key).ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            )
        })?;
        let key = auth::signing_key(secret, &date, &region, &service);
        if !auth::same_signature(&auth::sign(&key, policy), &signature.to_ascii_lowercase()) {
            return Err(S3Error::new(
                S3ErrorCode::SignatureDoesNotMatch,
                "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
            ));
        }
        Ok(access_key)
    }
}

fn decode_policy(policy: &str) -> Result<Value, S3Error> {
    let invalid = |why: &str| {
        S3Error::new(
            S3ErrorCode::InvalidPolicyDocument,
            format!("Invalid Policy: {why}"),
        )
    };
    let json = base64::engine::general_purpose::STANDARD
        .decode(policy.trim())
        .map_err(|_| invalid("Invalid 'Policy' base64."))?;
    let doc: Value = serde_json::from_slice(&json).map_err(|_| invalid("Invalid JSON."))?;
    if !doc.is_object() {
        return Err(invalid("Invalid JSON."));
    }
    Ok(doc)
}

fn policy_denied(why: String) -> S3Error {
    S3Error::new(
        S3ErrorCode::AccessDenied,
        format!("Invalid according to Policy: {why}"),
    )
}

fn check_expiration(doc: &Value, now: i64) -> Result<(), S3Error> {
    let invalid = || {
        S3Error::new(
            S3ErrorCode::InvalidPolicyDocument,
            "Invalid Policy: Invalid 'expiration' value.",
        )
    };
    let text = doc
        .get("expiration")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    let at = OffsetDateTime::parse(text, &Rfc3339).map_err(|_| invalid())?;
    if now >= at.unix_timestamp() {
        return Err(policy_denied("Policy expired.".into()));
    }
    Ok(())
}

/// One condition of the policy.
enum Condition {
    Eq(String, String),
    StartsWith(String, String),
    LengthRange(u64, u64),
}

fn parse_condition(c: &Value) -> Option<Condition> {
    if let Some(map) = c.as_object() {
        let (name, value) = map.iter().next().filter(|_| map.len() == 1)?;
        return Some(Condition::Eq(
            name.to_ascii_lowercase(),
            value.as_str()?.to_owned(),
        ));
    }
    let items = c.as_array()?;
    let op = items.first()?.as_str()?.to_ascii_lowercase();
    if op == "content-length-range" {
        let (min, max) = (items.get(1)?.as_u64()?, items.get(2)?.as_u64()?);
        return (items.len() == 3).then_some(Condition::LengthRange(min, max));
    }
    let name = items
        .get(1)?
        .as_str()?
        .strip_prefix('$')?
        .to_ascii_lowercase();
    let value = items.get(2)?.as_str()?.to_owned();
    match (op.as_str(), items.len()) {
        ("eq", 3) => Some(Condition::Eq(name, value)),
        ("starts-with", 3) => Some(Condition::StartsWith(name, value)),
        _ => None,
    }
}

fn check_conditions(doc: &Value, post: &PostRequest<'_>) -> Result<(), S3Error> {
    let list = doc
        .get("conditions")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidPolicyDocument,
                "Invalid Policy: Policy missing conditions.",
            )
        })?;
    let value_of = |name: &str| match name {
        "bucket" => Some(post.bucket),
        _ => post.form.get(name),
    };
    let mut named = Vec::with_capacity(list.len());
    for raw in list {
        let condition = parse_condition(raw).ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidPolicyDocument,
                format!("Invalid Policy: Invalid Condition: {raw}"),
            )
        })?;
        let failed = || policy_denied(format!("Policy Condition failed: {raw}"));
        match condition {
            Condition::Eq(name, want) => {
                if value_of(&name) != Some(want.as_str()) {
                    return Err(failed());
                }
                named.push(name);
            }
            Condition::StartsWith(name, prefix) => {
                if !value_of(&name).is_some_and(|v| v.starts_with(&prefix)) {
                    return Err(failed());
                }
                named.push(name);
            }
            Condition::LengthRange(min, max) => {
                let (code, words) = match post.file_len {
                    n if n > max => (
                        S3ErrorCode::EntityTooLarge,
                        "Your proposed upload exceeds the maximum allowed size",
                    ),
                    n if n < min => (
                        S3ErrorCode::EntityTooSmall,
                        "Your proposed upload is smaller than the minimum allowed size",
                    ),
                    _ => continue,
                };
                return Err(S3Error::new(code, words));
            }
        }
    }
    let extra: Vec<&str> = post
        .form
        .fields
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !exempt(n) && !named.iter().any(|m| m == n))
        .collect();
    if !extra.is_empty() {
        return Err(policy_denied(format!(
            "Extra input fields: {}",
            extra.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000; // 2027-01-15
    const DATE: &str = "20270115";

    fn verifier() -> Verifier {
        Verifier::new("us-east-1", [("AKID".to_owned(), "secret".to_owned())])
    }

    /// A form signed as boto3's generate_presigned_post signs it.
    fn signed(conditions: serde_json::Value, extra: &[(&str, &str)], expiration: &str) -> Form {
        let cred = format!("AKID/{DATE}/us-east-1/s3/aws4_request");
        let mut all = conditions.as_array().cloned().unwrap_or_default();
        all.push(serde_json::json!({"x-amz-algorithm": ALGORITHM}));
        all.push(serde_json::json!({"x-amz-credential": cred}));
        all.push(serde_json::json!({"x-amz-date": format!("{DATE}T000000Z")}));
        let doc = serde_json::json!({"expiration": expiration, "conditions": all});
        let policy = base64::engine::general_purpose::STANDARD.encode(doc.to_string());
        let key = auth::signing_key("secret", DATE, "us-east-1", "s3");
        let mut fields: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        fields.push(("x-amz-algorithm".into(), ALGORITHM.into()));
        fields.push(("x-amz-credential".into(), cred));
        fields.push(("x-amz-date".into(), format!("{DATE}T000000Z")));
        fields.push(("x-amz-signature".into(), auth::sign(&key, &policy)));
        fields.push(("policy".into(), policy));
        Form {
            fields,
            file_name: None,
            data_start: 0,
        }
    }

    fn check(form: &Form, len: u64) -> Result<Option<String>, S3Error> {
        verifier().verify_post(
            &PostRequest {
                form,
                bucket: "uploads",
                file_len: len,
            },
            NOW,
        )
    }

    const LATER: &str = "2027-02-01T00:00:00.000Z";

    #[test]
    fn a_form_its_policy_allows_is_verified() {
        let conds = serde_json::json!([{"bucket": "uploads"}, ["starts-with", "$key", "user/"],
            ["content-length-range", 1, 100], ["eq", "$Content-Type", "text/plain"]]);
        let form = signed(
            conds,
            &[
                ("key", "user/a.txt"),
                ("Content-Type", "text/plain"),
                ("x-ignore-me", "1"),
            ],
            LATER,
        );
        assert_eq!(check(&form, 10).unwrap().as_deref(), Some("AKID"));
        assert_eq!(
            check(&form, 101).unwrap_err().code,
            S3ErrorCode::EntityTooLarge
        );
        assert_eq!(
            check(&form, 0).unwrap_err().code,
            S3ErrorCode::EntityTooSmall
        );
    }

    #[test]
    fn what_the_policy_does_not_allow_is_refused() {
        let conds = serde_json::json!([{"bucket": "uploads"}, ["starts-with", "$key", "user/"]]);
        let outside = signed(conds.clone(), &[("key", "admin/a.txt")], LATER);
        assert_eq!(
            check(&outside, 1).unwrap_err().code,
            S3ErrorCode::AccessDenied
        );
        let extra = signed(
            conds.clone(),
            &[("key", "user/a"), ("acl", "public-read")],
            LATER,
        );
        let e = check(&extra, 1).unwrap_err();
        assert!(
            e.message.contains("Extra input fields: acl"),
            "{}",
            e.message
        );
        let expired = signed(conds.clone(), &[("key", "user/a")], "2027-01-01T00:00:00Z");
        assert!(check(&expired, 1)
            .unwrap_err()
            .message
            .contains("Policy expired"));
        let other_bucket = signed(
            serde_json::json!([{"bucket": "other"}, ["starts-with", "$key", ""]]),
            &[("key", "k")],
            LATER,
        );
        assert_eq!(
            check(&other_bucket, 1).unwrap_err().code,
            S3ErrorCode::AccessDenied
        );
    }

    #[test]
    fn a_changed_policy_or_signature_fails_the_signature() {
        let conds = serde_json::json!([["starts-with", "$key", ""]]);
        let mut form = signed(conds, &[("key", "k")], LATER);
        for (n, v) in form.fields.iter_mut() {
            if n == "x-amz-signature" {
                v.replace_range(0..1, if v.starts_with('0') { "1" } else { "0" });
            }
        }
        assert_eq!(
            check(&form, 1).unwrap_err().code,
            S3ErrorCode::SignatureDoesNotMatch
        );
    }

    #[test]
    fn no_signature_is_anonymous_and_sigv2_is_refused() {
        let plain = Form {
            fields: vec![("key".into(), "k".into())],
            file_name: None,
            data_start: 0,
        };
        assert_eq!(check(&plain, 1).unwrap(), None);
        let v2 = Form {
            fields: vec![
                ("awsaccesskeyid".into(), "AKID".into()),
                ("signature".into(), "x".into()),
            ],
            file_name: None,
            data_start: 0,
        };
        assert_eq!(check(&v2, 1).unwrap_err().code, S3ErrorCode::InvalidRequest);
    }
}
