//! Jobs with an HTTP master: Services labelled `colocate.dev/master: "true"` with a port named
//! `master` (master protocol v1, "Discovery"). One [`MasterClient`] per Service, kept while the
//! Service's address is unchanged, so its connection pool survives between decisions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Service;

use crate::live::endpoint::{DiscoveredJob, JobEndpoint, JobObject};
use crate::live::master::{MasterClient, RetryPolicy};
use crate::live::translate::{self, JOB_LABEL};

/// Overrides the address derived from the Service (`http://host:port`). For a controller
/// running outside the cluster (development, the test bed) where Service DNS names do not
/// resolve; not part of protocol v1.
pub const MASTER_URL_ANNOTATION: &str = "colocate.dev/master-url";

/// Name of the Service port the protocol talks to.
pub const MASTER_PORT_NAME: &str = "master";

/// How clients to masters are made: token, timeouts and retries come from the configuration.
pub trait ClientFactory: Send + Sync {
    fn client(&self, base_url: &str) -> Result<MasterClient, String>;
}

/// Builds [`MasterClient`]s with an optional token (read once at start) and a retry policy.
pub struct MasterClients {
    pub token: Option<String>,
    pub timeout: std::time::Duration,
    pub retry: RetryPolicy,
}

impl ClientFactory for MasterClients {
    fn client(&self, base_url: &str) -> Result<MasterClient, String> {
        let client = MasterClient::new(base_url).map_err(|e| e.to_string())?;
        let client = client.with_timeout(self.timeout).with_retry(self.retry);
        match &self.token {
            Some(t) => client.with_token(t).map_err(|e| e.to_string()),
            None => Ok(client),
        }
    }
}

/// The master Services found so far, by uid and URL.
pub struct MasterDiscovery {
    factory: Box<dyn ClientFactory>,
    clients: Mutex<BTreeMap<(String, String), Arc<dyn JobEndpoint>>>,
}

impl MasterDiscovery {
    pub fn new(factory: Box<dyn ClientFactory>) -> MasterDiscovery {
        MasterDiscovery { factory, clients: Mutex::new(BTreeMap::new()) }
    }

    /// The jobs behind `services`, and a sentence for each Service that cannot be used.
    pub fn jobs(&self, services: &[Arc<Service>]) -> (Vec<DiscoveredJob>, Vec<String>) {
        let mut jobs = Vec::new();
        let mut problems = Vec::new();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let mut keep = BTreeMap::new();
        for s in services {
            match master_of(s) {
                Ok(found) => {
                    let uid = s.metadata.uid.clone().unwrap_or_default();
                    let key = (uid, found.url.clone());
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
                Err(problem) => problems.push(problem),
            }
        }
        // Clients of Services that are gone (or moved) are dropped here.
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

/// Where a master Service points and which job it runs. Pure.
fn master_of(s: &Service) -> Result<FoundMaster, String> {
    let namespace = s.metadata.namespace.clone().unwrap_or_default();
    let name = s.metadata.name.clone().unwrap_or_default();
    let object = JobObject {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: namespace.clone(),
        name: name.clone(),
        uid: s.metadata.uid.clone(),
    };
    let labels = s.metadata.labels.clone().unwrap_or_default();
    // The job is named by the workers' label; a master Service normally carries it too.
    let job = labels.get(JOB_LABEL).cloned().unwrap_or_else(|| name.clone());
    let annotations = s.metadata.annotations.as_ref();
    let overrides =
        translate::job_overrides(&object.to_string(), annotations).map_err(|e| format!("master {object}: {e}"))?;
    let url = match annotations.and_then(|a| a.get(MASTER_URL_ANNOTATION)) {
        Some(url) => url.trim().to_string(),
        None => {
            let ports = s.spec.as_ref().and_then(|sp| sp.ports.as_ref());
            let port = ports
                .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some(MASTER_PORT_NAME)))
                .ok_or_else(|| format!("master {object}: no port named `{MASTER_PORT_NAME}`"))?;
            format!("http://{name}.{namespace}.svc:{}", port.port)
        }
    };
    Ok(FoundMaster { job, url, object, overrides })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(v: serde_json::Value) -> Arc<Service> {
        Arc::new(serde_json::from_value(v).expect("a Service"))
    }

    struct Plain;
    impl ClientFactory for Plain {
        fn client(&self, base_url: &str) -> Result<MasterClient, String> {
            MasterClient::new(base_url).map_err(|e| e.to_string())
        }
    }

    #[test]
    fn finds_url_job_and_overrides_and_names_what_is_wrong() {
        let d = MasterDiscovery::new(Box::new(Plain));
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
                "metadata": {"namespace": "ml", "name": "noport", "uid": "u3", "labels": {"colocate.dev/master": "true"}},
                "spec": {"ports": [{"name": "http", "port": 80}]}
            })),
            service(json!({
                "metadata": {"namespace": "ml", "name": "badweight", "uid": "u4",
                    "annotations": {"colocate.dev/weight": "-1"}},
                "spec": {"ports": [{"name": "master", "port": 80}]}
            })),
        ];
        let (jobs, problems) = d.jobs(&services);
        let found: Vec<_> = jobs.iter().map(|j| (j.key(), j.endpoint.describe(), j.overrides.priority)).collect();
        assert_eq!(
            found,
            [
                ("ml/local".to_string(), "http://127.0.0.1:4000".to_string(), None),
                ("ml/wd".to_string(), "http://wd-master.ml.svc:8080".to_string(), Some(5)),
            ]
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("Service ml/noport: no port named `master`"), "{problems:?}");
        assert!(problems[1].contains("colocate.dev/weight"), "{problems:?}");
    }

    #[test]
    fn keeps_a_client_while_the_address_is_unchanged() {
        let d = MasterDiscovery::new(Box::new(Plain));
        let s = service(json!({
            "metadata": {"namespace": "ml", "name": "m", "uid": "u1", "annotations": {"colocate.dev/master-url": "http://a:1"}},
        }));
        let first = d.jobs(std::slice::from_ref(&s)).0.remove(0).endpoint;
        let again = d.jobs(std::slice::from_ref(&s)).0.remove(0).endpoint;
        assert!(Arc::ptr_eq(&first, &again));
        let mut moved = (*s).clone();
        moved.metadata.annotations = Some([(MASTER_URL_ANNOTATION.to_string(), "http://b:1".to_string())].into());
        let other = d.jobs(&[Arc::new(moved)]).0.remove(0).endpoint;
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.describe(), "http://b:1");
    }
}
