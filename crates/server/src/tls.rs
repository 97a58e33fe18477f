//! TLS for `ferrox serve --tls-cert FILE --tls-key FILE`, on rustls with the ring provider (no
//! OpenSSL). The certificate chain and key are PEM files; loading checks that the key is the
//! certificate's, so a mismatched pair stops the server at start-up instead of failing every
//! handshake later. The server speaks HTTP/1.1 only and says so in ALPN.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, crypto::ring};
use tokio_rustls::TlsAcceptor;

/// A loaded certificate and key, ready to accept connections.
#[derive(Clone)]
pub struct TlsConfig(Arc<rustls::ServerConfig>);

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

/// Two configs are equal when they are the same load.
impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TlsConfig {}

impl TlsConfig {
    /// From PEM text: the certificate chain (leaf first) and its private key.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, String> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the certificate file is not PEM certificates: {e}"))?;
        if chain.is_empty() {
            return Err("the certificate file holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| format!("the key file holds no private key: {e}"))?;
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .map_err(|e| format!("the key does not fit the certificate: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self(Arc::new(config)))
    }

    /// From the two files `--tls-cert` and `--tls-key` name.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        Self::from_pem(&read(cert)?, &read(key)?)
            .map_err(|e| format!("{} / {}: {e}", cert.display(), key.display()))
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.0))
    }
}
