//! A real control plane for integration tests: etcd, kube-apiserver, kube-scheduler and kwok (fake
//! nodes and pods), started by `hack/testbed/up.sh` as plain processes on 127.0.0.1.
//!
//! ```ignore
//! mod support;
//! use support::testbed::{node_manifest, Testbed};
//!
//! #[tokio::test]
//! async fn fills_headroom() {
//!     let tb = Testbed::start(); // first local: dropped last, after the clients that use it
//!     tb.kubectl_apply(&node_manifest("node-a", "32", "256Gi"));
//!     let kubeconfig = kube::config::Kubeconfig::read_from(&tb.kubeconfig).unwrap();
//!     // ... a kube::Client from it, the controller under test, assertions ...
//! }
//! ```
//!
//! # One control plane per `Testbed::start()`
//!
//! Every call starts its own control plane in a fresh temp dir (about 5 s with cached binaries;
//! stopping it takes about 1.5 s), so tests never see each other's nodes and pods, and a test
//! may run in parallel with the others of its binary. Sharing one control plane per test binary
//! would save those seconds but couple the tests through cluster state and make teardown depend on
//! process exit; with a handful of cluster tests per binary it is not worth it. At most
//! `COLOCATE_TESTBED_PARALLEL` (default 4) control planes run at once per test binary: further
//! `start()` calls wait for a running one to be dropped (so a test must not hold more than that
//! many itself).
//!
//! # Blocking
//!
//! `start()` and the teardown in `Drop` are blocking (they run shell scripts and wait for them).
//! Calling `start()` directly at the top of a `#[tokio::test]` is fine: nothing else runs on the
//! runtime yet. Only if tasks of the runtime must make progress meanwhile (e.g. a second testbed
//! started while a controller task runs on a current-thread runtime), use
//! `tokio::task::spawn_blocking(Testbed::start)`.
//!
//! # Teardown guarantees
//!
//! - `Drop` runs `hack/testbed/down.sh` (TERM, then KILL, exactly the recorded pids), also when the
//!   test panicked. On a panic (or if `down.sh` failed) the temp dir is kept and its path and the
//!   last lines of every component log are printed (shown with the test's failure); otherwise the
//!   temp dir is removed. `TESTBED_KEEP=1` keeps it (and the pki/etcd data) in any case.
//! - A panic inside `start()` (up.sh failed, readiness timed out) tears down the same way: the
//!   `Testbed` exists before `up.sh` runs, so unwinding drops it. (`up.sh` is retried once, and only,
//!   if a component lost its randomly picked port: "address already in use" in its log.)
//! - If the test process dies without unwinding (SIGKILL on a timeout, abort, Ctrl-C), a watchdog
//!   runs `down.sh`: a tiny `bash` in its own process group, ignoring HUP/INT/TERM, that blocks
//!   reading a pipe only this process holds (close-on-exec, so no other child inherits it). The
//!   pipe closes when the process exits, however it exits, and the watchdog then stops the
//!   recorded pids (its output goes to `<dir>/watchdog-down.log`).
//!
//! # Environment
//!
//! - `COLOCATE_TEST_KUBECONFIG=<path>`: use that existing cluster; nothing is built, started or
//!   stopped (tests then share it: use unique object names).
//! - `TESTBED_BIN=<dir>`: prebuilt binaries (as `hack/testbed/build.sh` prints); no Go needed.
//! - `COLOCATE_TESTBED_CACHE`: the build cache (see `hack/testbed/build.sh`).
//! - `KUBECTL=<path>`: the kubectl of the `kubectl*` helpers (else `kubectl` from `PATH`).
//! - `COLOCATE_TESTBED_PARALLEL`: control planes at once per test binary (default 4).
//!
//! Without `COLOCATE_TEST_KUBECONFIG`, `go` (>= 1.26; not needed with `TESTBED_BIN`), `openssl`,
//! `curl` and `bash` must be on `PATH`; a missing one fails the test with how to install it (never
//! a silent skip). `hack/testbed/build.sh` runs once per test binary (instant on a warm cache);
//! `.ci/run` runs it before `cargo test` and exports `TESTBED_BIN`, so a cold Go build never
//! happens under a test timeout.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use super::process::{find_in_path, is_executable};

/// Points at the kubeconfig of an existing cluster to use instead of starting one.
pub const KUBECONFIG_ENV: &str = "COLOCATE_TEST_KUBECONFIG";

/// Annotation that makes kwok manage (and fake the kubelet of) a node.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// How long the API server may take, after `up.sh` returned, to have created namespace `default`.
const NAMESPACE_TIMEOUT: Duration = Duration::from_secs(30);

/// A control plane for one test; see the module docs.
pub struct Testbed {
    /// Kubeconfig of the cluster (admin, CA-verified TLS, namespace `default`).
    pub kubeconfig: PathBuf,
    /// `None` for an external cluster (`COLOCATE_TEST_KUBECONFIG`).
    owned: Option<Owned>,
}

/// What a started control plane needs for its teardown.
struct Owned {
    /// `None` only while being torn down.
    dir: Option<TempDir>,
    path: PathBuf,
    watchdog: Child,
    _slot: Slot,
}

impl Testbed {
    /// The cluster of `COLOCATE_TEST_KUBECONFIG`, or a fresh control plane that answers `/readyz`,
    /// has namespace `default`, and runs a scheduler and kwok. Blocking; panics (after tearing down
    /// whatever it started) with a message naming the cause if that is not possible.
    pub fn start() -> Testbed {
        Testbed::start_with(&[])
    }

    /// A control plane that also runs kube-controller-manager with these `--controllers`
    /// (Deployments get ReplicaSets and pods; `"*,-horizontalpodautoscaling"` leaves HPA status to
    /// the test). Needs the kube-controller-manager binary (`TESTBED_WITH_KCM=1` at build time).
    pub fn start_with_controller_manager(controllers: &str) -> Testbed {
        Testbed::start_with(&[("TESTBED_WITH_KCM", "1"), ("TESTBED_KCM_CONTROLLERS", controllers)])
    }

    /// Like [`start_with_controller_manager`](Self::start_with_controller_manager), with nodes
    /// that act more like kubelets: a deleted pod keeps its node until its grace period is over
    /// (`hack/testbed/kwok-graceful-delete.yaml`), as when a container takes all of
    /// `terminationGracePeriodSeconds` to exit (otherwise kwok removes deleted pods at once), and
    /// container statuses report resources, so in-place resizes are accepted and actuated a
    /// second later (`hack/testbed/kwok-resize.yaml`).
    pub fn start_kubelet_like(controllers: &str) -> Testbed {
        Testbed::start_with(&[
            ("TESTBED_WITH_KCM", "1"),
            ("TESTBED_KCM_CONTROLLERS", controllers),
            ("TESTBED_KWOK_GRACEFUL_DELETE", "1"),
            ("TESTBED_KWOK_RESIZE", "1"),
        ])
    }

    /// A control plane started with these environment variables for `hack/testbed/up.sh` (see its
    /// header: `TESTBED_WITH_KCM`, `TESTBED_KCM_CONTROLLERS`, `TESTBED_APISERVER_AUDIT_POLICY`,
    /// `TESTBED_KWOK_GRACEFUL_DELETE`, `TESTBED_KWOK_RESIZE`).
    pub fn start_with(env: &[(&str, &str)]) -> Testbed {
        if let Some(kubeconfig) = std::env::var_os(KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
            let kubeconfig = PathBuf::from(kubeconfig);
            assert!(
                kubeconfig.is_file(),
                "{KUBECONFIG_ENV}={} is not a file: point it at the kubeconfig of a running cluster, or unset it \
                 to start a control plane from hack/testbed",
                kubeconfig.display()
            );
            return Testbed { kubeconfig, owned: None };
        }
        require_tool("bash", "it runs the hack/testbed scripts");
        require_tool("openssl", "hack/testbed/up.sh makes the certificates of the control plane with it");
        require_tool("curl", "hack/testbed/up.sh polls the health endpoints of the components with it");
        let slot = Slot::acquire();
        let bin = testbed_bin();

        let dir = tempfile::Builder::new()
            .prefix("colocate-testbed.")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for the testbed: {e}"));
        let path = dir.path().to_path_buf();
        let watchdog = spawn_watchdog(&path);
        // From here on a panic drops `tb`, which runs down.sh.
        let tb = Testbed {
            kubeconfig: path.join("kubeconfig"),
            owned: Some(Owned { dir: Some(dir), path: path.clone(), watchdog, _slot: slot }),
        };

        let t0 = Instant::now();
        let mut attempt = 1;
        loop {
            let out = Command::new(script("up.sh"))
                .arg(&path)
                .envs(env.iter().copied())
                .env("TESTBED_BIN", &bin)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run hack/testbed/up.sh: {e}"));
            if out.status.success() {
                break;
            }
            // up.sh picks free ports at random; another process may take one before the component
            // binds it. That (and only that) is worth one more try.
            if attempt == 1 && logs_mention(&path, "address already in use") {
                eprintln!(
                    "testbed: up.sh lost a port race ({}); retrying once. Its stderr:\n{}",
                    out.status,
                    tail(&String::from_utf8_lossy(&out.stderr), 20)
                );
                run_down(&path);
                let _ = std::fs::rename(path.join("logs"), path.join("logs.attempt-1"));
                attempt += 1;
                continue;
            }
            panic!(
                "hack/testbed/up.sh {} failed ({}). Its stderr:\n{}",
                path.display(),
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 40)
            );
        }
        wait_for_default_namespace(&path);
        eprintln!("testbed: control plane up in {:.1}s in {}", t0.elapsed().as_secs_f64(), path.display());
        tb
    }

    /// Kills the kube-apiserver (SIGKILL: every watch breaks mid-stream, as when a control-plane
    /// node dies) and starts it again with the same command line, recording the new pid for
    /// teardown; returns once `/readyz` answers again. Panics on an external cluster.
    pub fn restart_apiserver(&self) {
        let dir = self.dir().expect("restart_apiserver needs a test bed this process started");
        let pids_file = dir.join("pids");
        let pids = std::fs::read_to_string(&pids_file).expect("pids file");
        let pid: u32 = pids
            .lines()
            .find_map(|l| l.strip_prefix("kube-apiserver "))
            .and_then(|p| p.trim().parse().ok())
            .expect("kube-apiserver in the pids file");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("apiserver command line");
        let args: Vec<String> =
            cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect();
        let port: u16 = args
            .iter()
            .find_map(|a| a.strip_prefix("--secure-port="))
            .and_then(|p| p.trim_matches('"').parse().ok())
            .expect("--secure-port on the apiserver command line");
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        // The process shows as a zombie as soon as its main thread exits, while other threads may
        // still hold the listening socket: wait until the port can be bound again instead.
        let start = Instant::now();
        while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "port {port} still in use 30 s after killing kube-apiserver"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::File::create(dir.join("logs/kube-apiserver.restarted.log")).expect("log file");
        let mut child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("restart kube-apiserver");
        let new_pid = child.id();
        let updated: String = pids
            .lines()
            .map(|l| if l.starts_with("kube-apiserver ") { format!("kube-apiserver {new_pid}") } else { l.to_string() })
            .map(|l| l + "\n")
            .collect();
        std::fs::write(&pids_file, updated).expect("update pids file");
        let start = Instant::now();
        loop {
            let ok = self.kubectl().args(["get", "--raw", "/readyz"]).output().is_ok_and(|o| o.status.success());
            if ok {
                // Not waited on from here: down.sh stops it by the recorded pid like the others.
                std::mem::forget(child);
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "the restarted kube-apiserver exited ({status}); see {}",
                    dir.join("logs/kube-apiserver.restarted.log").display()
                );
            }
            assert!(start.elapsed() < Duration::from_secs(60), "kube-apiserver not ready again within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether this is an existing cluster from `COLOCATE_TEST_KUBECONFIG` (nothing to tear down).
    pub fn is_external(&self) -> bool {
        self.owned.is_none()
    }

    /// The temp dir of a started control plane (`kubeconfig`, `env`, `pids`, `logs/`).
    pub fn dir(&self) -> Option<&Path> {
        self.owned.as_ref().map(|o| o.path.as_path())
    }

    /// The pids of the running components (empty for an external cluster).
    pub fn pids(&self) -> Vec<u32> {
        let Some(dir) = self.dir() else { return Vec::new() };
        let pids = std::fs::read_to_string(dir.join("pids")).unwrap_or_default();
        pids.lines().filter_map(|l| l.split_whitespace().nth(1)?.parse().ok()).collect()
    }

    /// `kubectl --kubeconfig <this cluster>`, to add arguments to.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(kubectl_bin());
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// The test bed's kubeconfig text with the admin token replaced by a fresh token of
    /// ServiceAccount `namespace/sa` (which must exist), valid for `duration` (e.g. `1h`).
    pub fn kubeconfig_as(&self, namespace: &str, sa: &str, duration: &str) -> String {
        let token = self.kubectl_run(&["create", "token", sa, "-n", namespace, "--duration", duration]);
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("the test bed's kubeconfig");
        assert!(admin.contains("token:"), "the test bed's kubeconfig authenticates with a token:\n{admin}");
        let lines: Vec<String> = admin
            .lines()
            .map(|l| match l.split_once("token:") {
                Some((indent, _)) if indent.trim().is_empty() => format!("{indent}token: {}", token.trim()),
                _ => l.to_string(),
            })
            .collect();
        lines.join("\n") + "\n"
    }

    /// Runs kubectl with `args`; returns its stdout, panics with its stderr if it fails.
    #[track_caller]
    pub fn kubectl_run(&self, args: &[&str]) -> String {
        let out = self.kubectl().args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("kubectl: {e}"));
        check_kubectl(args, out)
    }

    /// `kubectl apply -f -` of one manifest (a `kind: List` for several); returns kubectl's stdout.
    #[track_caller]
    pub fn kubectl_apply(&self, manifest: &Value) -> String {
        let mut child = self
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(manifest.to_string().as_bytes()).expect("writing the manifest to kubectl");
        drop(stdin);
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("kubectl: {e}"));
        check_kubectl(&["apply", "-f", "-"], out)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let Some(mut owned) = self.owned.take() else { return };
        let failed = std::thread::panicking();
        if failed {
            // Before down.sh: the state at the failure, not the shutdown.
            print_log_tails(&owned.path.join("logs"), 12);
        }
        let down = Command::new(script("down.sh")).arg(&owned.path).stdin(Stdio::null()).output();
        // The watchdog's own down.sh finds nothing left to stop; wait for it before removing the dir.
        drop(owned.watchdog.stdin.take());
        let _ = owned.watchdog.wait();
        let down_ok = matches!(&down, Ok(out) if out.status.success());
        let keep = failed || !down_ok || std::env::var_os("TESTBED_KEEP").is_some_and(|v| v == "1");
        let dir = owned.dir.take().expect("dropped once");
        if !keep {
            return; // `dir` removes the temp dir
        }
        let path = dir.keep();
        if !down_ok {
            let detail = match &down {
                Ok(out) => format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
                Err(e) => e.to_string(),
            };
            eprintln!(
                "testbed: hack/testbed/down.sh {} failed ({detail}); check for leftover processes",
                path.display()
            );
        }
        eprintln!("testbed: kept {} (component logs in {})", path.display(), path.join("logs").display());
    }
}

/// A fake node for kwok: the kwok annotation, `cpu` and `memory` (quantities such as `"32"` and
/// `"256Gi"`) as capacity and allocatable, and 110 pods, as in `hack/testbed/smoke.sh`. Unlike there,
/// no `kwok.x-k8s.io/node=fake:NoSchedule` taint: the testbed has no real nodes to keep pods off,
/// and pods created by the code under test need no toleration. Add a taint to the JSON if a test
/// wants one.
pub fn node_manifest(name: &str, cpu: &str, memory: &str) -> Value {
    let resources = json!({ "cpu": cpu, "memory": memory, "pods": "110" });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                KWOK_NODE_ANNOTATION: "fake",
            },
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/role": "agent",
            },
        },
        "status": {
            "allocatable": resources.clone(),
            "capacity": resources,
        },
    })
}

/// The kubectl binary: `$KUBECTL`, else `kubectl` on `PATH`; panics with how to get one.
pub fn kubectl_bin() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECTL").filter(|v| !v.is_empty()) {
        let k = PathBuf::from(k);
        if k.components().count() == 1 {
            if let Some(found) = find_in_path(&k.to_string_lossy()) {
                return found;
            }
        } else if is_executable(&k) {
            return k;
        }
        panic!("KUBECTL={} is not an executable", k.display());
    }
    if let Some(found) = find_in_path("kubectl") {
        return found;
    }
    // Not installed: fetch the same one CI uses (hack/testbed/kubectl.sh, cached).
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/testbed/kubectl.sh");
    let out =
        Command::new("bash").arg(&script).output().unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "kubectl is not on PATH and {} could not install one:\n{}\nInstall kubectl and put it on PATH, or set KUBECTL=/path/to/kubectl",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[track_caller]
fn check_kubectl(args: &[&str], out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {} failed ({}):\nstderr: {}\nstdout: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim(),
        stdout.trim()
    );
    stdout
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/testbed").join(name)
}

/// The bin dir of `hack/testbed/build.sh`, built once per test binary (`$TESTBED_BIN` if set).
fn testbed_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("TESTBED_BIN").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(bin));
        }
        require_tool(
            "go",
            "hack/testbed/build.sh builds etcd, kube-apiserver, kube-scheduler and kwok from Go modules; it needs \
             Go >= 1.26 (https://go.dev/doc/install; Debian's golang-go is too old). Or set TESTBED_BIN to a dir \
             of prebuilt binaries",
        );
        let t0 = Instant::now();
        let out = Command::new(script("build.sh"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run hack/testbed/build.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().last() {
            Some(bin) if out.status.success() && !bin.is_empty() => {
                if t0.elapsed() > Duration::from_secs(10) {
                    eprintln!("testbed: hack/testbed/build.sh took {:.0}s", t0.elapsed().as_secs_f64());
                }
                Ok(PathBuf::from(bin))
            }
            _ => Err(format!(
                "hack/testbed/build.sh failed ({}). Its stderr:\n{}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 40)
            )),
        }
    });
    bin.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// Panics, saying why the tool is needed and how to install it, unless `name` is on `PATH`.
fn require_tool(name: &str, why: &str) {
    if find_in_path(name).is_some() {
        return;
    }
    let install = match name {
        "go" => String::new(),
        _ => format!(" Install it, e.g. `apt-get install -y {name}` on Debian/Ubuntu."),
    };
    panic!(
        "`{name}` not found in PATH, needed for the testbed: {why}.{install} (Or set {KUBECONFIG_ENV} to the \
         kubeconfig of an existing cluster.)"
    );
}

/// Starts the watchdog that runs `down.sh <dir>` once this process closes its stdin, which the
/// kernel does when the process exits, however it exits (see the module docs).
fn spawn_watchdog(dir: &Path) -> Child {
    Command::new("bash")
        .arg("-c")
        .arg(r#"trap '' HUP INT TERM; cat >/dev/null; exec "$0" "$1" >>"$1/watchdog-down.log" 2>&1"#)
        .arg(script("down.sh"))
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0) // keeps Ctrl-C (SIGINT to the foreground group) away from it
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the testbed watchdog (bash): {e}"))
}

fn run_down(dir: &Path) {
    let _ = Command::new(script("down.sh")).arg(dir).stdin(Stdio::null()).output();
}

/// Reads `<dir>/env` (written by up.sh) into key/value pairs.
fn read_env(dir: &Path) -> Vec<(String, String)> {
    let env = std::fs::read_to_string(dir.join("env")).unwrap_or_default();
    env.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// up.sh waits for `/readyz`; pods in `default` also need the namespace, which the API server's
/// bootstrap controller creates asynchronously.
fn wait_for_default_namespace(dir: &Path) {
    let env = read_env(dir);
    let get = |key: &str| {
        env.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{key} missing from {}", dir.join("env").display()))
    };
    let (url, token, ca) = (get("APISERVER_URL"), get("APISERVER_TOKEN"), get("APISERVER_CA"));
    let deadline = Instant::now() + NAMESPACE_TIMEOUT;
    loop {
        let ok = Command::new("curl")
            .args(["-fsS", "--max-time", "2", "-o", "/dev/null", "--cacert", &ca, "-H"])
            .arg(format!("Authorization: Bearer {token}"))
            .arg(format!("{url}/api/v1/namespaces/default"))
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "namespace default did not appear within {NAMESPACE_TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn logs_mention(dir: &Path, needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir.join("logs")) else { return false };
    entries.flatten().any(|e| std::fs::read_to_string(e.path()).is_ok_and(|s| s.contains(needle)))
}

fn print_log_tails(logs: &Path, lines: usize) {
    let Ok(entries) = std::fs::read_dir(logs) else { return };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files {
        let text = std::fs::read(&file).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        eprintln!("---- testbed: last {lines} lines of {}\n{}", file.display(), tail(&text, lines));
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A permit to run one of at most `COLOCATE_TESTBED_PARALLEL` control planes at once.
struct Slot;

struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
}

static SLOTS: Slots = Slots { used: Mutex::new(0), freed: Condvar::new() };

impl Slot {
    fn acquire() -> Slot {
        let max = std::env::var("COLOCATE_TESTBED_PARALLEL").ok().and_then(|v| v.parse().ok()).unwrap_or(4).max(1);
        let mut used = SLOTS.used.lock().unwrap_or_else(PoisonError::into_inner);
        while *used >= max {
            used = SLOTS.freed.wait(used).unwrap_or_else(PoisonError::into_inner);
        }
        *used += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *SLOTS.used.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
        SLOTS.freed.notify_one();
    }
}
