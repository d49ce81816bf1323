//! TLS for the controller's HTTP peers (Prometheus and scrape targets, job masters): which
//! server certificates to trust and which certificate to present, read from files (mounted
//! Secrets). One place builds every `reqwest` client, so `check-config` and `run` read the
//! files the same way and cannot disagree about them.

use std::path::{Path, PathBuf};
use std::sync::Once;

use serde::{Deserialize, Serialize};

use crate::live::error_chain as chain;

/// How to speak TLS to one kind of peer. Without a CA bundle the system's roots are trusted
/// (the platform verifier); with one, only the bundle (as `curl --cacert`), which is what a
/// cluster-internal CA needs. A client certificate is for peers that ask for one (mTLS).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// PEM bundle of the CA certificates to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain presented to peers that ask for one.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// A TLS file that cannot be used: `key` is the configuration key that named it
/// (`run.master_tls.ca_file`), so that the message says what to fix.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{key}: {problem}")]
pub struct TlsError {
    pub key: String,
    pub problem: String,
}

/// The files of a [`TlsFiles`], read and parsed.
#[derive(Clone, Debug, Default)]
pub struct LoadedTls {
    roots: Option<Vec<reqwest::Certificate>>,
    identity: Option<reqwest::Identity>,
}

impl TlsFiles {
    pub fn is_empty(&self) -> bool {
        self == &TlsFiles::default()
    }

    /// Reads and parses every file now; `prefix` is the configuration key of this block
    /// (`run.master_tls`), used in errors.
    pub fn load(&self, prefix: &str) -> Result<LoadedTls, TlsError> {
        let error = |key: &str, problem: String| TlsError { key: format!("{prefix}.{key}"), problem };
        let roots = match &self.ca_file {
            Some(path) => {
                let pem = read(path).map_err(|p| error("ca_file", p))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| error("ca_file", format!("{}: {}", path.display(), chain(&e))))?;
                if certs.is_empty() {
                    return Err(error("ca_file", format!("{} holds no PEM certificate", path.display())));
                }
                Some(certs)
            }
            None => None,
        };
        let identity = match (&self.cert_file, &self.key_file) {
            (None, None) => None,
            (Some(_), None) => return Err(error("key_file", "missing: cert_file needs its key".into())),
            (None, Some(_)) => return Err(error("cert_file", "missing: key_file needs its certificate".into())),
            (Some(cert), Some(key)) => {
                let mut pem = read(cert).map_err(|p| error("cert_file", p))?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(error("cert_file", format!("{} holds no PEM certificate", cert.display())));
                }
                pem.push(b'\n');
                pem.extend(read(key).map_err(|p| error("key_file", p))?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    error(
                        "key_file",
                        format!(
                            "{} with {}: not a certificate and its key: {}",
                            key.display(),
                            cert.display(),
                            chain(&e)
                        ),
                    )
                })?;
                Some(identity)
            }
        };
        Ok(LoadedTls { roots, identity })
    }
}

impl LoadedTls {
    /// A client builder speaking TLS as configured (plain `http://` URLs work as before).
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        install_crypto_provider();
        let mut builder = reqwest::Client::builder().tls_backend_rustls();
        if let Some(roots) = &self.roots {
            builder = builder.tls_certs_only(roots.iter().cloned());
        }
        if let Some(identity) = &self.identity {
            builder = builder.identity(identity.clone());
        }
        builder
    }
}

/// reqwest is built without a crypto provider of its own (`rustls-no-provider`): the process
/// uses ring, which kube's TLS already brings. Installed once, before the first client.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err only if another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}
