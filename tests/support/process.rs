//! Child processes of the tests that run real servers from Debian packages (NGINX, its
//! exporter, Prometheus, wrk): started with their output in a log file, killed when dropped
//! (also when a test panics), and a missing tool named with the `apt-get` line that provides it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL) and reaped when dropped (also when a test panics); its
/// output goes to `<name>.log`.
pub struct Proc {
    pub name: &'static str,
    log: PathBuf,
    child: Child,
}

impl Proc {
    pub fn spawn(dir: &Path, name: &'static str, program: &Path, args: impl IntoIterator<Item = String>) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("a log file");
        let err = out.try_clone().expect("a log file");
        // Drop does not run when the test process itself is killed (a CI timeout): where
        // util-linux's setpriv is, the kernel then kills the child too (parent-death signal; it
        // follows the spawning thread, the test's own, which lives as long as the test).
        let mut command = match find_in_path("setpriv") {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name, log, child }
    }

    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("waiting on a child").is_some()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The first output line starting with `prefix`.
    pub fn output_line(&self, prefix: &str) -> String {
        let text = self.log_text();
        let line = text.lines().map(str::trim).find(|l| l.starts_with(prefix));
        line.unwrap_or_else(|| panic!("no `{prefix}` in the output of {}:\n{text}", self.name)).to_string()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `url` until its body contains `expect`; panics with the process's output after
/// `patience`.
pub async fn wait_http(proc: &Proc, url: &str, expect: &str, patience: Duration) {
    colocate::live::tls::install_crypto_provider();
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(2)).build().expect("a client");
    wait_http_with(&client, proc, url, expect, patience).await
}

/// [`wait_http`] through `client` (one that trusts a test CA, say).
pub async fn wait_http_with(client: &reqwest::Client, proc: &Proc, url: &str, expect: &str, patience: Duration) {
    let deadline = Instant::now() + patience;
    loop {
        if let Ok(response) = client.get(url).send().await {
            if response.text().await.is_ok_and(|body| body.contains(expect)) {
                return;
            }
        }
        let output = proc.log_text();
        assert!(
            Instant::now() < deadline,
            "{} did not serve `{expect}` at {url} within {patience:?}:\n{output}",
            proc.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Panics with the `apt-get` line that installs `tool` unless it is on PATH (or in /usr/sbin,
/// where Debian puts nginx, which a non-root PATH may lack).
pub fn require(tool: &str, package: &str) -> PathBuf {
    find_in_path(tool).unwrap_or_else(|| {
        panic!("`{tool}` not found: this test runs it. Install it with `apt-get install -y {package}`")
    })
}

/// The executable `tool` on PATH, or in /usr/sbin or /sbin.
pub fn find_in_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(tool))
        .find(|p| is_executable(p))
}

pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, text).expect("writing a config file");
    file
}

pub fn path(p: &Path) -> String {
    p.to_str().expect("a UTF-8 temporary path").to_string()
}
