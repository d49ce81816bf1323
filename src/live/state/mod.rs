//! The cluster as the decision core sees it, kept up to date as watch events arrive: each Node
//! and Pod is translated once per change into the core's terms and stored in place, so a
//! decision reads the state instead of rebuilding it from every object (at 30,000 pods a
//! rebuild takes 46-69 ms of a decision, and the stored objects most of the controller's
//! memory).
//!
//! What a pod's class is depends on the services and the managed jobs, which change rarely:
//! pods are classified as they arrive, and all of them again only when those change. Pure:
//! events in, a snapshot out; the watch loop (`live::watch`) feeds it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use kube::runtime::watcher::Event;

use super::batch::{self, BatchNames};
use super::names::object_key;
use super::sampler::usage::PodUsages;
use super::selector::LabelSelector;
use super::translate;
use crate::core::{Node, Pod, PodClass, Resources, Snapshot};

mod interned;
#[cfg(test)]
mod tests;

use interned::Names;

/// The state as the watches, the decider, discovery and the actuator share it.
pub type SharedState = Arc<Mutex<ClusterState>>;

/// The state, for one decision or one read: held briefly, never across an await. It stays
/// usable after a panic elsewhere, as every change to it is one whole event.
pub fn lock(state: &Mutex<ClusterState>) -> MutexGuard<'_, ClusterState> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// What decides a pod's class besides its own labels: the services' selectors (by namespace,
/// as a selector only applies in its own) and the jobs whose masters answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Classifier {
    pub selectors: BTreeMap<String, Vec<(String, LabelSelector)>>,
    pub managed: BTreeSet<String>,
}

impl Classifier {
    /// Class of a pod, with job and service names qualified by namespace; workers of jobs
    /// whose master is not answering are left alone like any other unmanaged pod.
    fn class(&self, namespace: &str, labels: &BTreeMap<String, String>, names: &mut Names) -> PodClass {
        let selectors = self.selectors.get(namespace).map_or(&[][..], Vec::as_slice);
        match translate::classify(labels, selectors) {
            PodClass::Worker { job } => {
                let key = object_key(namespace, &job);
                if self.managed.contains(&key) {
                    PodClass::Worker { job: names.get(&key) }
                } else {
                    PodClass::System
                }
            }
            PodClass::Master { job } => PodClass::Master { job: names.get(&object_key(namespace, &job)) },
            PodClass::Online { service } => PodClass::Online { service: names.get(&service) },
            PodClass::System => PodClass::System,
        }
    }
}

/// What the state keeps of a pod beyond the core's view of it: what classification and forced
/// deletion read.
#[derive(Clone, Debug)]
struct PodFacts {
    namespace: String,
    labels: BTreeMap<String, String>,
    uid: Option<String>,
    grace: Duration,
    /// Asks for batch resources without being a training job's worker: another system's
    /// BestEffort pod, which holds nothing the batch capacity is computed from.
    foreign_batch: bool,
}

/// A pod's usage as `usage` measures it. Another system's BestEffort batch pods get none:
/// what they use the kernel takes back from them first.
///
/// A pod whose CPU is not answered yet is not measured: the default CPU query (`irate`) needs
/// two scrapes of a new pod where the memory gauge needs one, and the core counts a pod not
/// measured as it counts a replica still to come (an autoscaled one at its HPA's target). Only
/// memory above its request makes such a pod count as measured, at its CPU request: memory
/// cannot be taken back, so what it uses must be held.
fn measured(pod: &Pod, facts: &PodFacts, usage: &PodUsages) -> Option<Resources> {
    if facts.foreign_batch {
        return None;
    }
    let u = usage.get(&*pod.name)?;
    let memory = u.memory_bytes.unwrap_or(0);
    match u.cpu_millicores {
        Some(cpu) => Some(Resources::new(cpu, memory, pod.requests.gpu)),
        None if memory > pod.requests.memory_bytes => {
            Some(Resources::new(pod.requests.cpu_milli, memory, pod.requests.gpu))
        }
        None => None,
    }
}

/// A worker pod as forced deletion sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPod {
    pub name: String,
    pub uid: Option<String>,
    /// Bound to a node and neither terminating nor finished: it holds room.
    pub holding: bool,
}

/// A pod as the state takes it in. Nearly every event is `Counted`, moved once into the state:
/// boxing it to shrink the rare variants would allocate for every pod event instead.
#[allow(clippy::large_enum_variant)]
enum Translated {
    Counted(Pod, PodFacts),
    /// Succeeded or Failed: it holds no node resources any more, as good as gone.
    Finished,
    /// Requests that do not parse: the sentence saying so.
    Unusable(String),
}

/// A node translated, or the sentence saying why it could not be.
type TranslatedNode = Result<Node, String>;

/// A pod by key as translated, with the object itself when it is a master Pod.
type PodEntry = (String, Translated, Option<Arc<KubePod>>);

#[derive(Default)]
pub struct ClusterState {
    /// Nodes and pods as the core reads them; services, jobs and time are set per decision.
    snapshot: Snapshot,
    /// The names the pods' node and class refer to, one copy each.
    names: Names,
    /// Index in `snapshot.nodes` by node name.
    node_slots: HashMap<String, usize>,
    /// Index in `snapshot.pods` and `facts` by `namespace/name` (the pod's name in the core).
    pod_slots: HashMap<String, usize>,
    facts: Vec<PodFacts>,
    /// Objects that could not be translated: a sentence each, by key.
    problems: BTreeMap<String, String>,
    /// Master Pods, as stripped by the watch: job discovery reads their annotations and ports.
    masters: BTreeMap<String, Arc<KubePod>>,
    classifier: Classifier,
    /// Pods' usage as last set, for the pods that arrive after it.
    usage: Arc<PodUsages>,
    /// A re-list in progress (`Init` seen, `InitDone` not yet): it replaces the kind's contents.
    node_buffer: Option<Vec<(String, TranslatedNode)>>,
    pod_buffer: Option<Vec<PodEntry>>,
    nodes_listed: bool,
    pods_listed: bool,
    /// The names of the batch resources nodes carry and workers request (`capacity: usage`).
    batch_names: BatchNames,
}

impl ClusterState {
    /// A state holding exactly these objects, as after a first list.
    pub fn from_objects(nodes: &[KubeNode], pods: &[KubePod]) -> ClusterState {
        let mut s = ClusterState::default();
        s.apply_node(&Event::Init);
        nodes.iter().for_each(|n| s.apply_node(&Event::InitApply(n.clone())));
        s.apply_node(&Event::InitDone);
        s.apply_pod(&Event::Init);
        pods.iter().for_each(|p| s.apply_pod(&Event::InitApply(p.clone())));
        s.apply_pod(&Event::InitDone);
        s
    }

    /// An empty state reading the batch resources by `names`.
    pub fn with_batch_names(names: BatchNames) -> ClusterState {
        ClusterState { batch_names: names, ..ClusterState::default() }
    }

    /// Both kinds have been listed: the state is the cluster's, not part of it.
    pub fn is_listed(&self) -> bool {
        self.nodes_listed && self.pods_listed
    }

    pub fn node_count(&self) -> usize {
        self.snapshot.nodes.len()
    }

    pub fn pod_count(&self) -> usize {
        self.snapshot.pods.len()
    }

    pub fn apply_node(&mut self, event: &Event<KubeNode>) {
        match event {
            Event::Apply(n) => {
                let (key, t) = node_entry(n, self.batch_names);
                self.put_node(key, t);
            }
            Event::Delete(n) => {
                let key = n.metadata.name.clone().unwrap_or_default();
                self.remove_node(&key);
            }
            Event::Init => self.node_buffer = Some(Vec::new()),
            Event::InitApply(n) => {
                let entry = node_entry(n, self.batch_names);
                self.node_buffer.get_or_insert_with(Vec::new).push(entry)
            }
            Event::InitDone => {
                let listed = self.node_buffer.take().unwrap_or_default();
                self.snapshot.nodes.clear();
                self.node_slots.clear();
                self.problems.retain(|k, _| !k.starts_with("node/"));
                listed.into_iter().for_each(|(key, t)| self.put_node(key, t));
                self.nodes_listed = true;
            }
        }
    }

    pub fn apply_pod(&mut self, event: &Event<KubePod>) {
        match event {
            Event::Apply(p) => {
                let (key, t, master) = self.pod_entry(p);
                self.put_pod(key, t, master);
            }
            Event::Delete(p) => self.remove_pod(&pod_key(p)),
            Event::Init => self.pod_buffer = Some(Vec::new()),
            Event::InitApply(p) => {
                let entry = self.pod_entry(p);
                self.pod_buffer.get_or_insert_with(Vec::new).push(entry);
            }
            Event::InitDone => {
                let listed = self.pod_buffer.take().unwrap_or_default();
                self.snapshot.pods.clear();
                self.facts.clear();
                self.pod_slots.clear();
                self.masters.clear();
                self.problems.retain(|k, _| k.starts_with("node/"));
                listed.into_iter().for_each(|(key, t, master)| self.put_pod(key, t, master));
                self.pods_listed = true;
            }
        }
    }

    /// Sets what classifies pods; when it changed, every pod is classified again.
    pub fn set_classifier(&mut self, classifier: Classifier) {
        if classifier == self.classifier {
            return;
        }
        self.classifier = classifier;
        for (pod, facts) in self.snapshot.pods.iter_mut().zip(&self.facts) {
            pod.class = self.classifier.class(&facts.namespace, &facts.labels, &mut self.names);
        }
    }

    /// The snapshot with these services, jobs and time, and the sentences of what could not be
    /// translated.
    pub fn snapshot(
        &mut self,
        now: Duration,
        services: Vec<crate::core::Service>,
        jobs: Vec<crate::core::Job>,
    ) -> &Snapshot {
        self.snapshot.now = now;
        self.snapshot.services = services;
        self.snapshot.jobs = jobs;
        &self.snapshot
    }

    pub fn problems(&self) -> impl Iterator<Item = &String> {
        self.problems.values()
    }

    /// Sets each pod's measured usage from `usage` (by `namespace/name`); a pod it does not
    /// know has none (the core counts it at its requests). A resource a query did not answer
    /// for the pod counts at the pod's request for CPU, and as no more than its request for
    /// memory (the core holds a pod's memory request whatever it uses).
    ///
    /// Kept for the pods that arrive later. Setting the same answers again (the same `Arc`)
    /// does nothing: the usage sampler sets each new join once, and decisions only confirm it.
    pub fn set_usage(&mut self, usage: &Arc<PodUsages>) {
        if Arc::ptr_eq(&self.usage, usage) {
            return;
        }
        self.usage = usage.clone();
        for (pod, facts) in self.snapshot.pods.iter_mut().zip(&self.facts) {
            pod.usage = measured(pod, facts, usage);
        }
    }

    /// Pods as the core sees them with the grace period each asked for.
    pub fn pods_with_grace(&self) -> impl Iterator<Item = (&Pod, Duration)> {
        self.snapshot.pods.iter().zip(&self.facts).map(|(p, f)| (p, f.grace))
    }

    /// Master Pods (labelled `colocate.dev/master: "true"`), for job discovery.
    pub fn master_pods(&self) -> Vec<Arc<KubePod>> {
        self.masters.values().cloned().collect()
    }

    /// Worker pods of `job` in `namespace` by its protocol labels, whether or not its master
    /// answers now.
    pub fn workers_of(&self, namespace: &str, job: &str) -> Vec<WorkerPod> {
        self.snapshot
            .pods
            .iter()
            .zip(&self.facts)
            .filter(|(_, f)| f.namespace == namespace && translate::worker_of(&f.labels) == Some(job))
            .map(|(p, f)| WorkerPod {
                name: p.name.split_once('/').map_or(p.name.as_str(), |(_, n)| n).to_string(),
                uid: f.uid.clone(),
                holding: p.node.is_some() && !p.terminating(),
            })
            .collect()
    }

    fn pod_entry(&mut self, p: &KubePod) -> PodEntry {
        let key = pod_key(p);
        let master = p.metadata.labels.as_ref().is_some_and(translate::is_master).then(|| Arc::new(p.clone()));
        if translate::pod_is_finished(p) {
            return (key, Translated::Finished, None);
        }
        // A worker in usage mode holds its batch request. Any other pod asking for batch
        // resources is another system's BestEffort pod: it holds none of the room the batch
        // capacity is computed from (its usage, like a worker's, is what the kernel takes back
        // first), so it counts with its `cpu` and `memory` requests only.
        let labels = p.metadata.labels.clone().unwrap_or_default();
        let is_worker = translate::worker_of(&labels).is_some();
        let requests = translate::pod_requests(p).map_err(|e| e.to_string()).and_then(|r| {
            let batch = batch::requested(p, self.batch_names).map_err(|e| e.to_string())?;
            Ok((r, batch))
        });
        let translated = match requests {
            Err(e) => Translated::Unusable(e),
            Ok((requests, batch)) => {
                let foreign_batch = !is_worker && batch != Resources::ZERO;
                let requests = if is_worker { requests + batch } else { requests };
                let namespace = p.metadata.namespace.clone().unwrap_or_default();
                let seconds = p.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
                let grace = seconds.map_or(DEFAULT_GRACE, |s| Duration::from_secs(s.max(0).unsigned_abs()));
                let pod = Pod {
                    name: key.clone(),
                    class: self.classifier.class(&namespace, &labels, &mut self.names),
                    node: p.spec.as_ref().and_then(|s| s.node_name.as_deref()).map(|n| self.names.get(n)),
                    requests,
                    ready: translate::pod_is_ready(p),
                    terminating_until: p.metadata.deletion_timestamp.as_ref().map(|t| translate::unix_time(&t.0)),
                    preempted: translate::pod_is_preempted(p),
                    started: p.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| translate::unix_time(&t.0)),
                    usage: None,
                };
                let facts = PodFacts { namespace, labels, uid: p.metadata.uid.clone(), grace, foreign_batch };
                Translated::Counted(pod, facts)
            }
        };
        (key, translated, master)
    }

    fn put_pod(&mut self, key: String, translated: Translated, master: Option<Arc<KubePod>>) {
        match master {
            Some(m) => self.masters.insert(key.clone(), m),
            None => self.masters.remove(&key),
        };
        let problem_key = format!("pod/{key}");
        let (pod, facts) = match translated {
            Translated::Counted(mut pod, facts) => {
                pod.usage = measured(&pod, &facts, &self.usage);
                (pod, facts)
            }
            Translated::Finished => {
                self.remove_slot(&key);
                self.problems.remove(&problem_key);
                return;
            }
            Translated::Unusable(problem) => {
                self.remove_slot(&key);
                self.problems.insert(problem_key, problem);
                return;
            }
        };
        self.problems.remove(&problem_key);
        match self.pod_slots.get(&key) {
            Some(&i) => {
                self.snapshot.pods[i] = pod;
                self.facts[i] = facts;
            }
            None => {
                self.pod_slots.insert(key, self.snapshot.pods.len());
                self.snapshot.pods.push(pod);
                self.facts.push(facts);
            }
        }
    }

    fn remove_pod(&mut self, key: &str) {
        self.masters.remove(key);
        self.problems.remove(&format!("pod/{key}"));
        self.remove_slot(key);
    }

    /// Removes a pod by moving the last one into its place.
    fn remove_slot(&mut self, key: &str) {
        let Some(i) = self.pod_slots.remove(key) else { return };
        self.snapshot.pods.swap_remove(i);
        self.facts.swap_remove(i);
        if let Some(moved) = self.snapshot.pods.get(i) {
            self.pod_slots.insert(moved.name.clone(), i);
        }
    }

    fn put_node(&mut self, key: String, translated: TranslatedNode) {
        let problem_key = format!("node/{key}");
        match translated {
            Ok(node) => {
                self.problems.remove(&problem_key);
                match self.node_slots.get(&key) {
                    Some(&i) => self.snapshot.nodes[i] = node,
                    None => {
                        self.node_slots.insert(key, self.snapshot.nodes.len());
                        self.snapshot.nodes.push(node);
                    }
                }
            }
            Err(problem) => {
                self.remove_node(&key);
                self.problems.insert(problem_key, problem);
            }
        }
    }

    fn remove_node(&mut self, key: &str) {
        self.problems.remove(&format!("node/{key}"));
        let Some(i) = self.node_slots.remove(key) else { return };
        self.snapshot.nodes.swap_remove(i);
        if let Some(moved) = self.snapshot.nodes.get(i) {
            self.node_slots.insert(moved.name.clone(), i);
        }
    }
}

fn node_entry(n: &KubeNode, names: BatchNames) -> (String, TranslatedNode) {
    let node = translate::node(n).map_err(|e| e.to_string()).and_then(|mut node| {
        node.batch = batch::carried(n, names).map_err(|e| e.to_string())?;
        Ok(node)
    });
    (n.metadata.name.clone().unwrap_or_default(), node)
}

fn pod_key(p: &KubePod) -> String {
    object_key(p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or(""))
}
