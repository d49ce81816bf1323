//! TLS to job masters, for real: the reference master serving https on 127.0.0.1 with
//! certificates the test makes, and the controller's client trusting a CA bundle, refusing a
//! certificate the bundle did not sign, and presenting a client certificate where the master
//! asks for one (mTLS).

mod support;

use std::path::PathBuf;
use std::time::Duration;

use colocate::live::master_client::{MasterClient, MasterError, RetryPolicy};
use colocate::live::tls::TlsFiles;
use colocate::master_protocol::{MasterConfig, MasterState, MemoryBackend, WorkerResources};
use colocate::reference_master::serve;
use colocate::reference_master::tls_listener::{server_config, TlsListener};
use support::certs::Ca;
use support::process::write;
use tokio::net::TcpListener;

/// A reference master serving https as `localhost` with a certificate `ca` signed; with
/// `client_ca`, it asks clients for a certificate that CA signed. Returns its base URL.
async fn https_master(dir: &std::path::Path, ca: &Ca, client_ca: Option<&Ca>) -> String {
    let issued = ca.issue(&["localhost", "127.0.0.1"]);
    let cert = write(dir, "master.crt", &issued.cert_pem);
    let key = write(dir, "master.key", &issued.key_pem);
    let client_ca = client_ca.map(|c| write(dir, "client-ca.crt", &c.pem));
    let tls = server_config(&cert, &key, client_ca.as_deref()).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let config = MasterConfig::new("wide-deep", 1, 32, WorkerResources::new("2", "4Gi"));
    let state = MasterState::new(config, MemoryBackend::new(6)).unwrap();
    tokio::spawn(serve(TlsListener::new(tcp, tls).unwrap(), state));
    format!("https://localhost:{port}")
}

fn client(base: &str, tls: &TlsFiles) -> Result<MasterClient, String> {
    let loaded = tls.load("run.master_tls").map_err(|e| e.to_string())?;
    let http = MasterClient::http_client(&loaded).map_err(|e| e.to_string())?;
    let retry = RetryPolicy {
        max_attempts: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
    };
    Ok(MasterClient::using(base, http)
        .map_err(|e| e.to_string())?
        .with_timeout(Duration::from_secs(5))
        .with_retry(retry))
}

fn ca_only(path: PathBuf) -> TlsFiles {
    TlsFiles { ca_file: Some(path), ..TlsFiles::default() }
}

#[tokio::test]
async fn a_master_over_https_is_reached_with_the_ca_bundle_and_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("masters CA");
    let base = https_master(dir.path(), &ca, None).await;

    let trusted = client(&base, &ca_only(write(dir.path(), "ca.crt", &ca.pem))).unwrap();
    let status = trusted.status().await.expect("status over https with the CA bundle");
    assert_eq!((status.job.as_str(), status.workers.current), ("wide-deep", 6));

    // A bundle of another CA, and the system's roots: the handshake fails, once (a retry
    // cannot cure a certificate), and the error names the URL.
    let other = Ca::new("someone else");
    for (what, tls) in
        [("another CA", ca_only(write(dir.path(), "other.crt", &other.pem))), ("system roots", TlsFiles::default())]
    {
        let error = client(&base, &tls).unwrap().status().await.expect_err(what);
        assert!(matches!(error, MasterError::Tls { .. }), "{what}: {error:?}");
        assert!(!error.is_transient(), "{what}");
        let text = error.to_string();
        assert!(text.contains(&base) && text.contains("certificate"), "{what}: {text}");
    }
}

#[tokio::test]
async fn a_master_that_asks_for_a_client_certificate_gets_the_configured_one() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("masters CA");
    let clients = Ca::new("controller clients CA");
    let base = https_master(dir.path(), &ca, Some(&clients)).await;
    let ca_file = write(dir.path(), "ca.crt", &ca.pem);

    let anonymous = client(&base, &ca_only(ca_file.clone())).unwrap().status().await;
    assert!(anonymous.is_err(), "a client without a certificate is refused: {anonymous:?}");

    let issued = clients.issue(&["colocate"]);
    let tls = TlsFiles {
        ca_file: Some(ca_file.clone()),
        cert_file: Some(write(dir.path(), "client.crt", &issued.cert_pem)),
        key_file: Some(write(dir.path(), "client.key", &issued.key_pem)),
    };
    let status = client(&base, &tls).unwrap().status().await.expect("status with the client certificate");
    assert_eq!(status.workers.current, 6);

    // A certificate signed by a CA the master does not trust is refused as well.
    let stranger = Ca::new("stranger").issue(&["colocate"]);
    let tls = TlsFiles {
        ca_file: Some(ca_file),
        cert_file: Some(write(dir.path(), "stranger.crt", &stranger.cert_pem)),
        key_file: Some(write(dir.path(), "stranger.key", &stranger.key_pem)),
    };
    assert!(client(&base, &tls).unwrap().status().await.is_err());
}

#[test]
fn certificate_files_that_cannot_be_used_are_named_by_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let issued = ca.issue(&["colocate"]);
    let cert = write(dir.path(), "c.crt", &issued.cert_pem);
    let key = write(dir.path(), "c.key", &issued.key_pem);
    let not_pem = write(dir.path(), "notes.txt", "hello\n");
    let load = |tls: TlsFiles| tls.load("run.master_tls").map(|_| ()).map_err(|e| e.to_string());
    for (tls, expected) in [
        (ca_only("/no/such/ca.crt".into()), "run.master_tls.ca_file: cannot read /no/such/ca.crt"),
        (ca_only(not_pem.clone()), "run.master_tls.ca_file: "),
        (TlsFiles { cert_file: Some(cert.clone()), ..TlsFiles::default() }, "run.master_tls.key_file: missing"),
        (TlsFiles { key_file: Some(key.clone()), ..TlsFiles::default() }, "run.master_tls.cert_file: missing"),
        (
            TlsFiles { cert_file: Some(not_pem.clone()), key_file: Some(key.clone()), ..TlsFiles::default() },
            "holds no PEM certificate",
        ),
        (
            TlsFiles { cert_file: Some(cert.clone()), key_file: Some(not_pem), ..TlsFiles::default() },
            "run.master_tls.key_file: ",
        ),
    ] {
        let error = load(tls.clone()).expect_err(expected);
        assert!(error.contains(expected), "{tls:?}: expected `{expected}` in `{error}`");
    }
    let good =
        TlsFiles { ca_file: Some(write(dir.path(), "ca.crt", &ca.pem)), cert_file: Some(cert), key_file: Some(key) };
    assert_eq!(load(good), Ok(()));
}
