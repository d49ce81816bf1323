//! Every job the controller steers: those with an HTTP master (Services or Pods labelled
//! `colocate.dev/master: "true"`) and, when enabled, those driven through Kubernetes adapters.

use kube::runtime::reflector::Store;

use k8s_openapi::api::core::v1::{Pod, Service};

use super::masters::MasterDiscovery;
use crate::live::adapters::AdapterJobs;
use crate::live::endpoint::DiscoveredJob;
use crate::live::translate::MASTER_LABEL;

pub struct JobDirectory {
    pub masters: MasterDiscovery,
    pub master_services: Store<Service>,
    /// Every pod (the pods reflector); the master Pods are picked out of it.
    pub pods: Store<Pod>,
    pub adapters: Option<AdapterJobs>,
}

impl JobDirectory {
    /// The jobs found now, by key, and a sentence for each object that cannot be used. A job
    /// found twice (a master and an adapter) is steered through the first found, the master.
    pub fn jobs(&self) -> (Vec<DiscoveredJob>, Vec<String>) {
        let is_master =
            |p: &Pod| p.metadata.labels.as_ref().and_then(|l| l.get(MASTER_LABEL)).is_some_and(|v| v == "true");
        let master_pods: Vec<_> = self.pods.state().into_iter().filter(|p| is_master(p)).collect();
        let (mut jobs, mut problems) = self.masters.jobs(&self.master_services.state(), &master_pods);
        if let Some(adapters) = &self.adapters {
            let (more, more_problems) = adapters.jobs();
            jobs.extend(more);
            problems.extend(more_problems);
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
