//! Every job the controller steers: those with an HTTP master (Services or Pods labelled
//! `colocate.dev/master: "true"`) and, when enabled, those driven through Kubernetes adapters.

use kube::runtime::reflector::Store;

use k8s_openapi::api::core::v1::Service;

use super::masters::MasterDiscovery;
use crate::live::adapters::AdapterJobs;
use crate::live::endpoint::DiscoveredJob;
use crate::live::state::{lock, SharedState};

pub struct JobDirectory {
    pub masters: MasterDiscovery,
    pub master_services: Store<Service>,
    /// The cluster state, which keeps the master Pods.
    pub state: SharedState,
    pub adapters: Option<AdapterJobs>,
    /// Only jobs in these namespaces are steered (run.job_namespaces); empty: every namespace.
    /// Workers of other jobs are then ordinary pods to the decision: load it cannot move.
    pub namespaces: Vec<String>,
}

impl JobDirectory {
    /// The jobs found now, by key, and a sentence for each object that cannot be used. A job
    /// found twice (a master and an adapter) is steered through the first found, the master.
    pub fn jobs(&self) -> (Vec<DiscoveredJob>, Vec<String>) {
        let master_pods = lock(&self.state).master_pods();
        let (mut jobs, mut problems) = self.masters.jobs(&self.master_services.state(), &master_pods);
        if let Some(adapters) = &self.adapters {
            let (more, more_problems) = adapters.jobs();
            jobs.extend(more);
            problems.extend(more_problems);
        }
        if !self.namespaces.is_empty() {
            jobs.retain(|j| self.namespaces.contains(&j.namespace));
        }
        let mut seen = std::collections::BTreeSet::new();
        jobs.retain(|j| {
            let fresh = seen.insert(j.key());
            if !fresh {
                problems.push(format!("job {}: found twice ({}); steering the first one only", j.key(), j.object));
            }
            fresh
        });
        (jobs, problems)
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use crate::live::controller::masters::PlainClients;

    fn master_service(namespace: &str, job: &str) -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": format!("{job}-master"), "uid": format!("{namespace}-{job}"),
                "labels": {"colocate.dev/master": "true", "colocate.dev/job": job}},
            "spec": {"ports": [{"name": "master", "port": 8080}]}
        }))
        .unwrap()
    }

    #[test]
    fn only_jobs_in_the_configured_namespaces_are_steered() {
        let (services, mut writer) = store::<Service>();
        for (namespace, job) in [("ml", "wd"), ("research", "bert"), ("web", "stray")] {
            writer.apply_watcher_event(&Event::Apply(master_service(namespace, job)));
        }
        let state = SharedState::default();
        let directory = |namespaces: &[&str]| JobDirectory {
            masters: MasterDiscovery::new(Box::new(PlainClients)),
            master_services: services.clone(),
            state: state.clone(),
            adapters: None,
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        };
        let keys = |d: JobDirectory| {
            let mut keys: Vec<String> = d.jobs().0.iter().map(|j| j.key()).collect();
            keys.sort();
            keys
        };
        assert_eq!(keys(directory(&["ml", "research"])), ["ml/wd", "research/bert"]);
        assert_eq!(keys(directory(&[])), ["ml/wd", "research/bert", "web/stray"], "empty: every namespace");
    }
}
