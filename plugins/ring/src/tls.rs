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

/// The peer listener's TLS acceptor.
pub fn acceptor(t: &PeerTls) -> Result<TlsAcceptor, String> {
    let open = |p: &str| {
        File::open(p)
            .map(BufReader::new)
            .map_err(|e| format!("{p}: {e}"))
    };
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut open(&t.cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", t.cert))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", t.cert));
    }
    let key = rustls_pemfile::private_key(&mut open(&t.key)?)
        .map_err(|e| format!("{}: {e}", t.key))?
        .ok_or_else(|| format!("{}: no private key", t.key))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", t.cert))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}
