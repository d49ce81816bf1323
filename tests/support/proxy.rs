//! A TCP proxy that can cut a process off from the API server, as a network partition does.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A TCP proxy to the API server that can be cut: afterwards it forwards nothing, in either
/// direction, on old or new connections, and closes none (a black hole: requests hang, as in a
/// network partition).
pub struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let cut2 = cut.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(down) = conn else { continue };
                if cut2.load(Ordering::SeqCst) {
                    held.push(down);
                    continue;
                }
                let Ok(up) = TcpStream::connect(upstream) else { continue };
                let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                let (c1, c2) = (cut2.clone(), cut2.clone());
                std::thread::spawn(move || pump(down, up, c1));
                std::thread::spawn(move || pump(u2, d2, c2));
            }
        });
        Proxy { addr, cut }
    }

    /// The API server's address in `kubeconfig` (its current context's cluster).
    pub fn upstream_of(kubeconfig: &Path) -> SocketAddr {
        let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("readable kubeconfig");
        let server = config.clusters.first().and_then(|c| c.cluster.as_ref()?.server.clone()).expect("a server");
        let authority = server.trim_start_matches("https://").trim_start_matches("http://");
        authority.trim_end_matches('/').parse().expect("API server on an IP address and port")
    }

    /// `kubeconfig` with its server replaced by this proxy, written to `to` (as JSON, which
    /// is YAML).
    pub fn kubeconfig_through(&self, kubeconfig: &Path, to: &Path) {
        let mut config = kube::config::Kubeconfig::read_from(kubeconfig).expect("readable kubeconfig");
        for c in &mut config.clusters {
            if let Some(cluster) = c.cluster.as_mut() {
                cluster.server = Some(format!("https://{}", self.addr));
            }
        }
        std::fs::write(to, serde_json::to_string(&config).unwrap()).unwrap();
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// New connections go through again; those open during the cut stay dead.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, cut: Arc<AtomicBool>) {
    let mut buf = [0u8; 16 * 1024];
    let mut dead = false;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        dead |= cut.load(Ordering::SeqCst);
        if dead {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    if !dead {
        let _ = to.shutdown(Shutdown::Write);
    }
}
