//! Jobs with an HTTP master: Services or Pods labelled `colocate.dev/master: "true"` with a port
//! named `master` (master protocol v1, "Discovery"). One [`MasterClient`] per master object, kept
//! while its address is unchanged, so its connection pool survives between decisions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::live::endpoint::{DiscoveredJob, JobEndpoint, JobObject};
use crate::live::master_client::{MasterClient, RetryPolicy};
use crate::live::names::{JOB_LABEL, MASTER_URL_ANNOTATION};
use crate::live::translate;

/// Name of the Service port the protocol talks to.
pub const MASTER_PORT_NAME: &str = "master";

/// How clients to masters are made: token, timeouts and retries come from the configuration.
pub trait ClientFactory: Send + Sync {
    fn client(&self, base_url: &str) -> Result<MasterClient, String>;
}

/// Builds [`MasterClient`]s with an optional token (read once at start) and a retry policy,
/// all sending through one HTTP client (TLS as configured, one connection pool).
pub struct MasterClients {
    pub http: reqwest::Client,
    pub token: Option<String>,
    pub timeout: std::time::Duration,
    pub retry: RetryPolicy,
}

impl ClientFactory for MasterClients {
    fn client(&self, base_url: &str) -> Result<MasterClient, String> {
        let client = MasterClient::using(base_url, self.http.clone()).map_err(|e| e.to_string())?;
        let client = client.with_timeout(self.timeout).with_retry(self.retry);
        match &self.token {
            Some(t) => client.with_token(t).map_err(|e| e.to_string()),
            None => Ok(client),
        }
    }
}

/// Clients with the defaults, for tests that discover masters without talking to them.
#[cfg(test)]
pub(crate) struct PlainClients;

#[cfg(test)]
impl ClientFactory for PlainClients {
    fn client(&self, base_url: &str) -> Result<MasterClient, String> {
        MasterClient::new(base_url).map_err(|e| e.to_string())
    }
}

/// The master objects found so far, by uid and URL.
pub struct MasterDiscovery {
    factory: Box<dyn ClientFactory>,
    clients: Mutex<BTreeMap<(String, String), Arc<dyn JobEndpoint>>>,
}

impl MasterDiscovery {
    pub fn new(factory: Box<dyn ClientFactory>) -> MasterDiscovery {
        MasterDiscovery { factory, clients: Mutex::new(BTreeMap::new()) }
    }

    /// The jobs behind master `services` and `pods`, and a sentence for each that cannot be used.
    /// Pods not running yet (no IP) are skipped quietly: they are found once they are.
    pub fn jobs(&self, services: &[Arc<Service>], pods: &[Arc<Pod>]) -> (Vec<DiscoveredJob>, Vec<String>) {
        let mut jobs = Vec::new();
        let mut problems = Vec::new();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let mut keep = BTreeMap::new();
        let found =
            services.iter().map(|s| master_of_service(s).map(Some)).chain(pods.iter().map(|p| master_of_pod(p)));
        for found in found {
            let found = match found {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(problem) => {
                    problems.push(problem);
                    continue;
                }
            };
            let key = (found.object.uid.clone().unwrap_or_default(), found.url.clone());
            let endpoint = match clients.remove(&key) {
                Some(e) => e,
                None => match self.factory.client(&found.url) {
                    Ok(c) => Arc::new(c) as Arc<dyn JobEndpoint>,
                    Err(e) => {
                        problems.push(format!("{}: {e}", found.object));
                        continue;
                    }
                },
            };
            keep.insert(key, endpoint.clone());
            jobs.push(DiscoveredJob {
                namespace: found.object.namespace.clone(),
                name: found.job,
                object: found.object,
                endpoint,
                overrides: found.overrides,
            });
        }
        // Clients of masters that are gone (or moved) are dropped here.
        *clients = keep;
        jobs.sort_by_key(DiscoveredJob::key);
        (jobs, problems)
    }
}

struct FoundMaster {
    job: String,
    url: String,
    object: JobObject,
    overrides: translate::JobOverrides,
}

fn job_object(kind: &str, meta: &ObjectMeta) -> JobObject {
    JobObject {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone(),
    }
}

/// The job, overrides and URL of a master object; `address` gives the URL unless the
/// annotation overrides it.
fn found_master(
    object: JobObject,
    meta: &ObjectMeta,
    address: impl FnOnce(&JobObject) -> Result<String, String>,
) -> Result<FoundMaster, String> {
    // The job is named by the workers' label; a master normally carries it too.
    let job = meta.labels.as_ref().and_then(|l| l.get(JOB_LABEL)).cloned().unwrap_or_else(|| object.name.clone());
    let annotations = meta.annotations.as_ref();
    let overrides =
        translate::job_overrides(&object.to_string(), annotations).map_err(|e| format!("master {object}: {e}"))?;
    let url = match annotations.and_then(|a| a.get(MASTER_URL_ANNOTATION)) {
        Some(url) => url.trim().to_string(),
        None => address(&object)?,
    };
    Ok(FoundMaster { job, url, object, overrides })
}

/// What to do about a master whose address does not resolve because it is a Service's
/// in-cluster name and colocate runs outside the cluster (`run` on a laptop against a test
/// cluster). Pure.
pub fn unresolved_hint(url: &str, error: &str) -> Option<String> {
    let host = reqwest::Url::parse(url).ok()?.host_str()?.to_string();
    let in_cluster = host.ends_with(".svc") || host.contains(".svc.");
    let dns = ["dns error", "failed to lookup address", "Name or service not known"].iter().any(|m| error.contains(m));
    (in_cluster && dns).then(|| {
        format!(
            "{host} resolves only inside the cluster; running colocate outside it, annotate the master Service \
             with {MASTER_URL_ANNOTATION} set to a URL this machine can reach (a port-forward, say)"
        )
    })
}

/// Where a master Service points and which job it runs. Pure.
fn master_of_service(s: &Service) -> Result<FoundMaster, String> {
    found_master(job_object("Service", &s.metadata), &s.metadata, |object| {
        let ports = s.spec.as_ref().and_then(|sp| sp.ports.as_ref());
        let port = ports
            .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some(MASTER_PORT_NAME)))
            .ok_or_else(|| format!("master {object}: no port named `{MASTER_PORT_NAME}`"))?;
        // A port that says it speaks https (Kubernetes' `appProtocol`) is reached over TLS.
        let scheme = match port.app_protocol.as_deref() {
            Some(p) if p.eq_ignore_ascii_case("https") => "https",
            _ => "http",
        };
        Ok(format!("{scheme}://{}.{}.svc:{}", object.name, object.namespace, port.port))
    })
}

/// Where a master Pod listens (its IP and the container port named `master`) and which job it
/// runs; None while it has no IP or is terminating. Pure.
fn master_of_pod(p: &Pod) -> Result<Option<FoundMaster>, String> {
    let ip = p.status.as_ref().and_then(|s| s.pod_ip.as_deref()).filter(|ip| !ip.is_empty());
    let Some(ip) = ip.filter(|_| p.metadata.deletion_timestamp.is_none()) else { return Ok(None) };
    let found = found_master(job_object("Pod", &p.metadata), &p.metadata, |object| {
        let containers = p.spec.iter().flat_map(|s| &s.containers);
        let port = containers
            .flat_map(|c| c.ports.iter().flatten())
            .find(|port| port.name.as_deref() == Some(MASTER_PORT_NAME))
            .ok_or_else(|| format!("master {object}: no container port named `{MASTER_PORT_NAME}`"))?;
        // An IPv6 address needs brackets in a URL.
        let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
        Ok(format!("http://{host}:{}", port.container_port))
    })?;
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_in_cluster_name_that_does_not_resolve_gets_the_annotation_hint() {
        let dns = "error sending request: client error (Connect): dns error: failed to lookup address information: \
                   Name or service not known";
        let hint = super::unresolved_hint("http://m.ml.svc:8080", dns).expect("a hint");
        assert!(hint.contains("m.ml.svc resolves only inside the cluster") && hint.contains("colocate.dev/master-url"));
        assert_eq!(super::unresolved_hint("http://m.ml.svc:8080", "connection refused"), None, "not a DNS failure");
        assert_eq!(super::unresolved_hint("http://master.example.com:8080", dns), None, "not an in-cluster name");
    }

    use serde_json::json;

    use super::*;

    fn service(v: serde_json::Value) -> Arc<Service> {
        Arc::new(serde_json::from_value(v).expect("a Service"))
    }

    #[test]
    fn finds_url_job_and_overrides_and_names_what_is_wrong() {
        let d = MasterDiscovery::new(Box::new(PlainClients));
        let services = [
            service(json!({
                "metadata": {"namespace": "ml", "name": "wd-master", "uid": "u1",
                    "labels": {"colocate.dev/master": "true", "colocate.dev/job": "wd"},
                    "annotations": {"colocate.dev/priority": "5"}},
                "spec": {"ports": [{"name": "metrics", "port": 9000}, {"name": "master", "port": 8080}]}
            })),
            service(json!({
                "metadata": {"namespace": "ml", "name": "local", "uid": "u2",
                    "labels": {"colocate.dev/master": "true"},
                    "annotations": {"colocate.dev/master-url": "http://127.0.0.1:4000"}},
                "spec": {}
            })),
            service(json!({
                "metadata": {"namespace": "ml", "name": "secure", "uid": "u5",
                    "labels": {"colocate.dev/master": "true", "colocate.dev/job": "ctr"}},
                "spec": {"ports": [{"name": "master", "port": 8443, "appProtocol": "https"}]}
            })),
            service(json!({
                "metadata": {"namespace": "ml", "name": "noport", "uid": "u3", "labels": {"colocate.dev/master": "true"}},
                "spec": {"ports": [{"name": "http", "port": 80}]}
            })),
            service(json!({
                "metadata": {"namespace": "ml", "name": "badweight", "uid": "u4",
                    "annotations": {"colocate.dev/weight": "-1"}},
                "spec": {"ports": [{"name": "master", "port": 80}]}
            })),
        ];
        let (jobs, problems) = d.jobs(&services, &[]);
        let found: Vec<_> = jobs.iter().map(|j| (j.key(), j.endpoint.describe(), j.overrides.priority)).collect();
        assert_eq!(
            found,
            [
                ("ml/ctr".to_string(), "https://secure.ml.svc:8443".to_string(), None),
                ("ml/local".to_string(), "http://127.0.0.1:4000".to_string(), None),
                ("ml/wd".to_string(), "http://wd-master.ml.svc:8080".to_string(), Some(5)),
            ]
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("Service ml/noport: no port named `master`"), "{problems:?}");
        assert!(problems[1].contains("colocate.dev/weight"), "{problems:?}");
    }

    #[test]
    fn master_pods_are_found_by_ip_and_container_port_once_running() {
        let d = MasterDiscovery::new(Box::new(PlainClients));
        let pod = |name: &str, ip: Option<&str>, port_name: &str| -> Arc<Pod> {
            let mut v = json!({
                "metadata": {"namespace": "ml", "name": name, "uid": name,
                    "labels": {"colocate.dev/master": "true", "colocate.dev/job": "wd"}},
                "spec": {"containers": [{"name": "m", "ports": [{"name": port_name, "containerPort": 7070}]}]},
                "status": {}
            });
            if let Some(ip) = ip {
                v["status"]["podIP"] = json!(ip);
            }
            Arc::new(serde_json::from_value(v).expect("a Pod"))
        };
        let pods = [
            pod("v4", Some("10.0.0.7"), "master"),
            pod("v6", Some("fd00::7"), "master"),
            pod("starting", None, "master"),
            pod("wrongport", Some("10.0.0.8"), "http"),
        ];
        let (jobs, problems) = d.jobs(&[], &pods);
        let found: Vec<_> = jobs.iter().map(|j| (j.object.to_string(), j.endpoint.describe())).collect();
        assert_eq!(
            found,
            [
                ("Pod ml/v4".to_string(), "http://10.0.0.7:7070".to_string()),
                ("Pod ml/v6".to_string(), "http://[fd00::7]:7070".to_string()),
            ]
        );
        assert_eq!(problems, ["master Pod ml/wrongport: no container port named `master`"]);
    }

    #[test]
    fn keeps_a_client_while_the_address_is_unchanged() {
        let d = MasterDiscovery::new(Box::new(PlainClients));
        let s = service(json!({
            "metadata": {"namespace": "ml", "name": "m", "uid": "u1", "annotations": {"colocate.dev/master-url": "http://a:1"}},
        }));
        let first = d.jobs(std::slice::from_ref(&s), &[]).0.remove(0).endpoint;
        let again = d.jobs(std::slice::from_ref(&s), &[]).0.remove(0).endpoint;
        assert!(Arc::ptr_eq(&first, &again));
        let mut moved = (*s).clone();
        moved.metadata.annotations = Some([(MASTER_URL_ANNOTATION.to_string(), "http://b:1".to_string())].into());
        let other = d.jobs(&[Arc::new(moved)], &[]).0.remove(0).endpoint;
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.describe(), "http://b:1");
    }
}
