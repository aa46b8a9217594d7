//! The one HTTP client floe-control uses for the catalog and the nodes' admin APIs: rustls with
//! the Mozilla roots, plus the CAs `tls.ca_file` names. Built once at start-up; the iceberg
//! FileIO storage (rebuilt by the iceberg crate from its serialised form) takes it from here too.

use std::sync::OnceLock;
use std::time::Duration;

static SHARED: OnceLock<reqwest::Client> = OnceLock::new();

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The CA file holds no usable PEM certificate.
    #[error("no PEM certificate could be read: {0}")]
    BadCa(String),
    /// The TLS stack refused the configuration.
    #[error("building the HTTP client: {0}")]
    Build(String),
}

/// The certificates of a PEM bundle, checked.
pub fn trust(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, HttpError> {
    let certs =
        reqwest::Certificate::from_pem_bundle(pem).map_err(|e| HttpError::BadCa(e.to_string()))?;
    if certs.is_empty() {
        return Err(HttpError::BadCa("the file has no CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// A client trusting the default roots and `ca_pem`'s certificates.
pub fn build(ca_pem: Option<&[u8]>) -> Result<reqwest::Client, HttpError> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(Duration::from_secs(10));
    if let Some(pem) = ca_pem {
        for c in trust(pem)? {
            b = b.add_root_certificate(c);
        }
    }
    b.build().map_err(|e| HttpError::Build(e.to_string()))
}

/// Makes `client` the process's shared client (the first call wins).
pub fn install(client: reqwest::Client) {
    let _ = SHARED.set(client);
}

/// The shared client (default roots only if none was installed).
pub fn shared() -> reqwest::Client {
    SHARED
        .get_or_init(|| build(None).unwrap_or_default())
        .clone()
}

pub use floe_core::chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("error sending request")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_bad_ca_file_is_refused_and_a_chain_keeps_every_cause() {
        assert!(matches!(trust(b"not a pem"), Err(HttpError::BadCa(_))));
        let e = Outer(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        ));
        assert_eq!(
            chain(&e),
            "error sending request: invalid peer certificate: UnknownIssuer"
        );
    }
}
