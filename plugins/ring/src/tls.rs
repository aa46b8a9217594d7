//! TLS for the peer API: the listener's acceptor (tokio-rustls with the ring provider, as
//! Pingora's rustls build uses) from `fleet.tls`; the asker side trusts `fleet.tls.ca` through
//! Pingora's connector (see [`crate::client::PeerClient`]).

use std::fs::File;
use std::io::BufReader;
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::config::PeerTls;

/// Why the peer listener's TLS could not be set up: the file, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("fleet.tls: {file}: {why}")]
pub struct TlsError {
    /// The certificate or key file.
    pub file: String,
    /// What is wrong.
    pub why: String,
}

fn tls_error(file: &str, why: impl std::fmt::Display) -> TlsError {
    TlsError {
        file: file.to_owned(),
        why: why.to_string(),
    }
}

/// The peer listener's TLS acceptor.
pub fn acceptor(t: &PeerTls) -> Result<TlsAcceptor, TlsError> {
    let open = |p: &str| {
        File::open(p)
            .map(BufReader::new)
            .map_err(|e| tls_error(p, e))
    };
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut open(&t.cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| tls_error(&t.cert, e))?;
    if certs.is_empty() {
        return Err(tls_error(&t.cert, "no certificate"));
    }
    let key = rustls_pemfile::private_key(&mut open(&t.key)?)
        .map_err(|e| tls_error(&t.key, e))?
        .ok_or_else(|| tls_error(&t.key, "no private key"))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(&t.cert, e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls_error(&t.cert, e))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}
