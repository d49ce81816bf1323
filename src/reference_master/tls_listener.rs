//! The reference master's HTTPS listener: TLS handshakes run concurrently, each bounded, so a
//! client that connects and says nothing cannot hold up the others; what fails is logged and
//! dropped, as a plain listener drops a refused connection.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Longest a handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS configuration that cannot be built, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {message}", path.display())]
pub struct ServerTlsError {
    what: &'static str,
    path: std::path::PathBuf,
    message: String,
}

/// The server side of TLS: `cert_file` (PEM chain) and `key_file` (PEM key); with
/// `client_ca_file`, clients must present a certificate that bundle signed (mTLS).
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    client_ca_file: Option<&Path>,
) -> Result<Arc<ServerConfig>, ServerTlsError> {
    let error = |what: &'static str, path: &Path, message: String| ServerTlsError { what, path: path.into(), message };
    let certs = certificates(cert_file).map_err(|m| error("certificate", cert_file, m))?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| error("key", key_file, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| error("certificate", cert_file, e.to_string()))?;
    let builder = match client_ca_file {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca).map_err(|m| error("client CA bundle", ca, m))? {
                roots.add(cert).map_err(|e| error("client CA bundle", ca, e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| error("client CA bundle", ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_single_cert(certs, key).map_err(|e| error("certificate and key", cert_file, e.to_string()))?;
    // axum serves HTTP/1.1 only here.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

/// Accepts TCP connections and hands axum those whose handshake succeeded.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> io::Result<TlsListener> {
        let addr = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, ready) = mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // As axum's own listener: out of descriptors and the like pass.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, addr, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task only ends when aborted, which happens when this is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
