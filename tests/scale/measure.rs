//! The figures of the scale report: memory from /proc, decision latency from the controller's
//! histogram, the controller's requests from the apiserver's audit log, the whole apiserver's
//! request counters, and the state of the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::testbed::Testbed;

/// Resident memory of a process, in KiB: now (VmRSS) and its peak so far (VmHWM).
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl Memory {
    /// Reads `/proc/<pid>/status`; panics if the process is gone.
    pub fn of(pid: u32) -> Memory {
        let path = format!("/proc/{pid}/status");
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (did the process exit?)"));
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("{path} has no {name}"))
        };
        Memory { rss_kib: field("VmRSS:"), hwm_kib: field("VmHWM:") }
    }

    pub fn json(&self) -> Value {
        json!({"rss_mib": mib(self.rss_kib), "hwm_mib": mib(self.hwm_kib)})
    }
}

/// CPU time (user + system) a process has used so far, in seconds: `/proc/<pid>/stat` counts it
/// in USER_HZ ticks, 100 per second on Linux whatever the kernel's own tick rate.
pub fn cpu_seconds(pid: u32) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (did the process exit?)"));
    // The command name (in parentheses) may contain spaces: count fields after its end.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line; 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU used over a phase: seconds, and the average number of cores busy.
pub fn cpu_use(cpu_seconds: f64, wall_seconds: f64) -> Value {
    json!({"cpu_seconds": round(cpu_seconds, 1), "cores": round(cpu_seconds / wall_seconds.max(1e-3), 2)})
}

fn mib(kib: u64) -> f64 {
    (kib as f64 / 1024.0 * 10.0).round() / 10.0
}

/// Resident memory of every test bed component (the `pids` file up.sh writes), by name.
pub fn component_memory(bed: &Testbed) -> BTreeMap<String, Value> {
    let Some(dir) = bed.dir() else { return BTreeMap::new() };
    let pids = std::fs::read_to_string(dir.join("pids")).unwrap_or_default();
    pids.lines()
        .filter_map(|l| {
            let (name, pid) = l.split_once(' ')?;
            let pid: u32 = pid.trim().parse().ok()?;
            // A component that exited has no status; report what is there.
            std::fs::metadata(format!("/proc/{pid}/status")).ok()?;
            Some((name.to_string(), Memory::of(pid).json()))
        })
        .collect()
}

/// A Prometheus histogram as exported: cumulative buckets (upper bound, count), sum and count.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Histogram {
    /// The histogram `name` in exposition text; empty if absent.
    pub fn parse(text: &str, name: &str) -> Histogram {
        let mut h = Histogram::default();
        let bucket = format!("{name}_bucket{{le=\"");
        for line in text.lines() {
            let value = || line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            if let Some(rest) = line.strip_prefix(&bucket) {
                let le = rest.split('"').next().unwrap_or_default();
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) };
                h.buckets.push((le, value()));
            } else if line.starts_with(&format!("{name}_sum ")) {
                h.sum = value();
            } else if line.starts_with(&format!("{name}_count ")) {
                h.count = value();
            }
        }
        h
    }

    /// What was observed after `earlier` (same buckets).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let before = |le: f64| earlier.buckets.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, c)| *c);
        Histogram {
            buckets: self.buckets.iter().map(|(le, c)| (*le, c - before(*le))).collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        }
    }

    /// The `q` quantile as Prometheus' `histogram_quantile` estimates it: linear within the
    /// bucket it falls in; in the `+Inf` bucket, the largest finite bound (a lower bound).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank {
                if le.is_infinite() {
                    return Some(lower.0);
                }
                let in_bucket = cumulative - lower.1;
                let fraction = if in_bucket > 0.0 { (rank - lower.1) / in_bucket } else { 1.0 };
                return Some(lower.0 + (le - lower.0) * fraction);
            }
            lower = (le, cumulative);
        }
        Some(lower.0)
    }

    /// Count, mean and estimated p50/p99 in milliseconds, and how many fell beyond the last bound.
    pub fn summary(&self) -> Value {
        let ms = |s: Option<f64>| s.map(|s| (s * 1e5).round() / 100.0);
        let finite = self.buckets.iter().filter(|(le, _)| le.is_finite()).map(|(_, c)| *c).fold(0.0, f64::max);
        json!({
            "count": self.count.round() as u64,
            "mean_ms": ms((self.count > 0.0).then(|| self.sum / self.count)),
            "p50_ms": ms(self.quantile(0.5)),
            "p99_ms": ms(self.quantile(0.99)),
            "above_last_bucket": (self.count - finite).round() as u64,
        })
    }
}

/// One request the controller made, as the audit log recorded it.
#[derive(Clone, Debug)]
pub struct Request {
    pub verb: String,
    /// `resource[/subresource]`, or the path of a non-resource request.
    pub target: String,
}

/// The apiserver's audit log (`TESTBED_APISERVER_AUDIT_POLICY`), which logs only the controller.
pub struct AuditLog {
    path: PathBuf,
    user: String,
}

impl AuditLog {
    pub fn new(dir: &Path, user: &str) -> AuditLog {
        AuditLog { path: dir.join("logs/audit.log"), user: user.to_string() }
    }

    /// Every request of the user so far, in arrival order (one `RequestReceived` event each),
    /// and every answer with an error code as `verb target code`.
    pub fn read(&self) -> (Vec<Request>, Vec<String>) {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut requests = Vec::new();
        let mut errors = Vec::new();
        for event in text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
            if event["user"]["username"] != self.user.as_str() {
                continue;
            }
            let verb = event["verb"].as_str().unwrap_or_default().to_string();
            let object = &event["objectRef"];
            let target = match (object["resource"].as_str(), object["subresource"].as_str()) {
                (Some(r), Some(s)) => format!("{r}/{s}"),
                (Some(r), None) => r.to_string(),
                _ => event["requestURI"].as_str().unwrap_or_default().split('?').next().unwrap_or_default().into(),
            };
            match event["stage"].as_str() {
                Some("RequestReceived") => requests.push(Request { verb, target }),
                Some("ResponseComplete") => {
                    let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
                    if code >= 400 {
                        errors.push(format!("{verb} {target} {code}"));
                    }
                }
                _ => {}
            }
        }
        (requests, errors)
    }

    /// The policy: every request of `user` at Metadata level, nothing else.
    pub fn policy(user: &str) -> String {
        json!({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["ResponseStarted"],
            "rules": [{"level": "Metadata", "users": [user]}, {"level": "None"}]
        })
        .to_string()
    }
}

/// Requests of one phase: total, per second, and per `verb target`.
pub fn request_rates(requests: &[Request], seconds: f64) -> Value {
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for r in requests {
        *by_kind.entry(format!("{} {}", r.verb, r.target)).or_default() += 1;
    }
    json!({
        "seconds": round(seconds, 1),
        "requests": requests.len(),
        "per_second": round(requests.len() as f64 / seconds.max(1e-3), 3),
        "by_verb_and_resource": by_kind,
    })
}

/// The apiserver's `apiserver_request_total`, summed per verb (every client together).
pub fn apiserver_requests_by_verb(bed: &Testbed) -> BTreeMap<String, f64> {
    let text = bed.kubectl_run(&["get", "--raw", "/metrics"]);
    let mut by_verb = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let verb = line.split("verb=\"").nth(1).and_then(|v| v.split('"').next()).unwrap_or("?");
        let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *by_verb.entry(verb.to_string()).or_insert(0.0) += value;
    }
    by_verb
}

/// Requests per second per verb between two `apiserver_requests_by_verb` readings.
pub fn rates_between(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, seconds: f64) -> Value {
    let by_verb: BTreeMap<&String, f64> = after
        .iter()
        .map(|(verb, n)| (verb, round((n - before.get(verb).copied().unwrap_or(0.0)) / seconds.max(1e-3), 1)))
        .filter(|(_, rate)| *rate > 0.0)
        .collect();
    json!({"per_second": round(by_verb.values().sum(), 1), "by_verb": by_verb})
}

/// Cores, memory and load of the machine the test ran on.
pub fn machine() -> Value {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let gib = |name: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kib| round(kib / 1024.0 / 1024.0, 1))
    };
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "load_average": load_average(),
        "mem_total_gib": gib("MemTotal:"),
        "mem_available_gib": gib("MemAvailable:"),
    })
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> Vec<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).filter_map(|v| v.parse().ok()).collect()
}

pub fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}
