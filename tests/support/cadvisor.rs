//! Serves pods' CPU and memory usage under cAdvisor's names and labels, for pods that run
//! nothing (kwok's): `container_cpu_usage_seconds_total{namespace, pod, container}`, a counter
//! of CPU seconds integrated from each pod's set usage, and `container_memory_working_set_bytes`.
//! A real Prometheus scrapes it and `colocate run` reads it through its default usage queries,
//! as it reads the kubelet's `/metrics/cadvisor` on a real cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use super::metrics_server::MetricsServer;
use super::process::free_port;
use super::prometheus::Prometheus;

/// One pod's series.
struct Usage {
    cores: f64,
    memory_bytes: f64,
    /// CPU seconds counted so far.
    cpu_seconds: f64,
}

struct State {
    /// By (namespace, pod).
    pods: BTreeMap<(String, String), Usage>,
    last_update: Instant,
}

impl State {
    fn advance(&mut self, now: Instant) {
        let now = now.max(self.last_update);
        let dt = now.duration_since(self.last_update).as_secs_f64();
        for u in self.pods.values_mut() {
            u.cpu_seconds += u.cores * dt;
        }
        self.last_update = now;
    }

    /// From now on (the caller has advanced the counters) pod `key` uses `cores` and
    /// `memory_bytes`. A pod seen for the first time starts with an hour of CPU time counted.
    fn put(&mut self, key: (String, String), cores: f64, memory_bytes: f64) {
        let u = self.pods.entry(key).or_insert(Usage { cores, memory_bytes, cpu_seconds: cores * 3600.0 });
        u.cores = cores;
        u.memory_bytes = memory_bytes;
    }

    fn render(&self) -> String {
        let mut out = String::from("# TYPE container_cpu_usage_seconds_total counter\n");
        for ((ns, pod), u) in &self.pods {
            out.push_str(&format!(
                "container_cpu_usage_seconds_total{{namespace=\"{ns}\",pod=\"{pod}\",container=\"main\"}} {:.6}\n",
                u.cpu_seconds
            ));
        }
        out.push_str("# TYPE container_memory_working_set_bytes gauge\n");
        for ((ns, pod), u) in &self.pods {
            out.push_str(&format!(
                "container_memory_working_set_bytes{{namespace=\"{ns}\",pod=\"{pod}\",container=\"main\"}} {:.0}\n",
                u.memory_bytes
            ));
        }
        out
    }
}

pub struct Cadvisor {
    state: Arc<Mutex<State>>,
    server: MetricsServer,
}

impl Cadvisor {
    pub fn start() -> Cadvisor {
        let state = Arc::new(Mutex::new(State { pods: BTreeMap::new(), last_update: Instant::now() }));
        let served = state.clone();
        let server = MetricsServer::start(move || {
            let mut s = served.lock().unwrap();
            s.advance(Instant::now());
            s.render()
        });
        Cadvisor { state, server }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// From now on, pod `namespace/pod` uses `cores` of CPU and `memory_bytes`. A pod seen for
    /// the first time starts with an hour of CPU time counted, so that `rate()` over a window
    /// that began before it does not read a ramp.
    pub fn set(&self, namespace: &str, pod: &str, cores: f64, memory_bytes: f64) {
        let mut s = self.state.lock().unwrap();
        s.advance(Instant::now());
        s.put((namespace.to_string(), pod.to_string()), cores, memory_bytes);
    }

    /// Every running pod in `namespace` matching `selector` uses `cores` and `memory_bytes`;
    /// pods gone are no longer served (as cAdvisor drops a deleted container's series).
    /// Returns how many pods are served there; `None` (nothing changed) when the API server
    /// does not answer.
    pub async fn follow(
        &self,
        client: &Client,
        namespace: &str,
        selector: &str,
        cores: f64,
        memory_bytes: f64,
    ) -> Option<usize> {
        let all_alike = |pods: &[Pod]| {
            pods.iter().filter_map(|p| p.metadata.name.clone()).map(|name| (name, (cores, memory_bytes))).collect()
        };
        self.follow_together(client, namespace, selector, &all_alike).await
    }

    /// Every bound pod of the cluster for which `usage` gives (cores, memory bytes) uses that;
    /// other pods are not served. Returns how many are served.
    pub async fn follow_all(
        &self,
        client: &Client,
        usage: &(impl Fn(&Pod) -> Option<(f64, f64)> + Sync),
    ) -> Option<usize> {
        let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await.ok()?;
        let mut served = BTreeMap::new();
        for p in &pods.items {
            if p.spec.as_ref().is_none_or(|s| s.node_name.is_none()) {
                continue;
            }
            let (Some(ns), Some(name)) = (&p.metadata.namespace, &p.metadata.name) else { continue };
            if let Some(u) = usage(p) {
                served.insert((ns.clone(), name.clone()), u);
            }
        }
        let n = served.len();
        let mut s = self.state.lock().unwrap();
        s.advance(Instant::now());
        s.pods.retain(|key, _| served.contains_key(key));
        for (key, (cores, memory_bytes)) in served {
            s.put(key, cores, memory_bytes);
        }
        Some(n)
    }

    /// Every bound pod of `namespace` matching `selector` that `usage` gives (cores, memory
    /// bytes), given all of them, uses that; the others there are not served. Returns how many
    /// are served.
    pub async fn follow_together(
        &self,
        client: &Client,
        namespace: &str,
        selector: &str,
        usage: &(impl Fn(&[Pod]) -> BTreeMap<String, (f64, f64)> + Sync),
    ) -> Option<usize> {
        let pods = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().labels(selector))
            .await
            .ok()?;
        let bound: Vec<Pod> =
            pods.items.into_iter().filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())).collect();
        let served = usage(&bound);
        let mut s = self.state.lock().unwrap();
        s.advance(Instant::now());
        s.pods.retain(|(ns, pod), _| ns != namespace || served.contains_key(pod));
        for (pod, (cores, memory_bytes)) in &served {
            s.put((namespace.to_string(), pod.clone()), *cores, *memory_bytes);
        }
        Some(served.len())
    }

    /// Keeps [`Cadvisor::follow_together`]ing every second until the returned guard is dropped.
    pub fn keep_following_together(
        self: &Arc<Self>,
        client: Client,
        namespace: &'static str,
        selector: &'static str,
        usage: impl Fn(&[Pod]) -> BTreeMap<String, (f64, f64)> + Send + Sync + 'static,
    ) -> Following {
        let me = self.clone();
        Following(tokio::spawn(async move {
            loop {
                me.follow_together(&client, namespace, selector, &usage).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }))
    }

    /// Keeps [`Cadvisor::follow_all`]ing every `period` until the returned guard is dropped.
    pub fn keep_following_all(
        self: &Arc<Self>,
        client: Client,
        period: Duration,
        usage: impl Fn(&Pod) -> Option<(f64, f64)> + Send + Sync + 'static,
    ) -> Following {
        let me = self.clone();
        Following(tokio::spawn(async move {
            loop {
                me.follow_all(&client, &usage).await;
                tokio::time::sleep(period).await;
            }
        }))
    }

    /// Keeps [`Cadvisor::follow`]ing `namespace`/`selector` every second, at the usage
    /// `usage()` gives at each round, until the returned guard is dropped.
    pub fn keep_following(
        self: &Arc<Self>,
        client: Client,
        namespace: &'static str,
        selector: &'static str,
        usage: impl Fn() -> (f64, f64) + Send + Sync + 'static,
    ) -> Following {
        self.keep_following_together(client, namespace, selector, move |pods| {
            let (cores, memory_bytes) = usage();
            pods.iter().filter_map(|p| p.metadata.name.clone()).map(|name| (name, (cores, memory_bytes))).collect()
        })
    }
}

/// Stops [`Cadvisor::keep_following`] when dropped.
pub struct Following(tokio::task::JoinHandle<()>);

impl Drop for Following {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A cAdvisor stand-in and a real Prometheus scraping it every second, its files in `dir`.
pub async fn with_prometheus(dir: &std::path::Path) -> (Arc<Cadvisor>, Prometheus) {
    with_prometheus_every(dir, Duration::from_secs(1)).await
}

/// As [`with_prometheus`], scraped every `scrape`.
pub async fn with_prometheus_every(dir: &std::path::Path, scrape: Duration) -> (Arc<Cadvisor>, Prometheus) {
    let cadvisor = Arc::new(Cadvisor::start());
    let scrape = format!("{}ms", scrape.as_millis());
    let config = format!(
        "global: {{scrape_interval: {scrape}, evaluation_interval: {scrape}}}\nscrape_configs:\n  - job_name: cadvisor\n    \
         static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
        cadvisor.port()
    );
    let prometheus = Prometheus::start(dir, free_port(), &config).await;
    (cadvisor, prometheus)
}

/// [`with_prometheus`], serving every NGINX pod of the test bed's `web` namespace at `cores` and
/// `memory_bytes`, until the returned guard is dropped.
pub async fn nginx_at(
    dir: &std::path::Path,
    client: &Client,
    cores: f64,
    memory_bytes: f64,
) -> (Prometheus, Following) {
    let (cadvisor, prometheus) = with_prometheus(dir).await;
    let following = cadvisor.keep_following(client.clone(), "web", "app=nginx", move || (cores, memory_bytes));
    (prometheus, following)
}
