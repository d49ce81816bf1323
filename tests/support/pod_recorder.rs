//! Watches the online and training pods of the test bed and keeps, per pod, when the test saw
//! what happen to it: created, Unschedulable, bound, preempted by the scheduler, deleted, gone;
//! and samples the counts once a second. The spike replay's figures are computed from these
//! (tests/spike_replay.rs). Times are when the watch event reached the test, so they include the
//! watch's delivery delay (milliseconds on the loopback test bed), the same for every run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colocate::live::batch::{requested, BatchNames};
use colocate::live::names::{JOB_LABEL, ROLE_LABEL};
use colocate::live::translate::pod_requests;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

/// Label of the online service's pods (`app=nginx`).
const ONLINE_LABEL: (&str, &str) = ("app", "nginx");

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Online,
    Worker { job: String },
}

/// What happened to one pod, by when the test saw it.
#[derive(Clone, Debug)]
pub struct PodRecord {
    pub name: String,
    pub role: Role,
    pub cpu_milli: i64,
    /// The CPU it asks of the batch capacity colocate publishes (a BestEffort worker's
    /// `colocate.dev/batch-cpu`), in millicores.
    pub batch_cpu_milli: i64,
    pub seen: Instant,
    /// First seen with PodScheduled=False, reason Unschedulable: no node had room.
    pub unschedulable: Option<Instant>,
    pub bound: Option<Instant>,
    /// First seen with a deletionTimestamp (it may still hold its node: grace period).
    pub deleting: Option<Instant>,
    pub gone: Option<Instant>,
    /// First seen with DisruptionTarget=True, reason PreemptionByScheduler, and whether the pod
    /// was still live then. The scheduler sets that condition, then deletes the pod, so a live
    /// victim shows the condition before its deletion; a pod already leaving (released by its
    /// master) can be picked as a victim too, which changes nothing for it.
    pub preempted: Option<(Instant, bool)>,
}

impl PodRecord {
    /// Bound and not leaving at `t`.
    pub fn running_at(&self, t: Instant) -> bool {
        by(self.bound, t) && !by(self.deleting, t) && !by(self.gone, t)
    }

    /// Holding a node at `t` (bound, possibly in its grace period).
    pub fn on_node_at(&self, t: Instant) -> bool {
        by(self.bound, t) && !by(self.gone, t)
    }

    /// Created and not bound at `t`, nor deleted.
    pub fn pending_at(&self, t: Instant) -> bool {
        self.seen <= t && !by(self.bound, t) && !by(self.deleting, t) && !by(self.gone, t)
    }

    /// Waiting for room at `t`: seen Unschedulable, not bound, not deleted yet.
    pub fn unschedulable_at(&self, t: Instant) -> bool {
        by(self.unschedulable, t) && !by(self.bound, t) && !by(self.deleting, t) && !by(self.gone, t)
    }

    /// The interval this pod waited for room, clipped to `[from, to]`.
    pub fn unschedulable_within(&self, from: Instant, to: Instant) -> Option<(Instant, Instant)> {
        let start = self.unschedulable?.max(from);
        let end = [self.bound, self.deleting, self.gone].into_iter().flatten().min().unwrap_or(to).min(to);
        (end > start).then_some((start, end))
    }
}

/// Whether `event` happened by `t`.
fn by(event: Option<Instant>, t: Instant) -> bool {
    event.is_some_and(|e| e <= t)
}

/// Counts at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Instant,
    /// Workers bound and not leaving.
    pub workers: usize,
    /// CPU held by workers, leaving ones included (they keep their node until they are gone).
    pub worker_cpu_milli: i64,
    /// CPU the running workers ask for, as requests or of the batch capacity: what training runs
    /// on, whatever the capacity mode.
    pub running_worker_cpu_milli: i64,
    pub online_running: usize,
    pub online_unschedulable: usize,
    /// Worker pods created and not bound yet (replacements of preempted workers, or growth).
    pub workers_pending: usize,
}

pub struct PodRecorder {
    records: Arc<Mutex<HashMap<String, PodRecord>>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl PodRecorder {
    /// Starts watching every namespace and sampling once a second; returns once the first list
    /// has been read.
    pub async fn start(client: Client) -> PodRecorder {
        let records: Arc<Mutex<HashMap<String, PodRecord>>> = Arc::default();
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let synced = Arc::new(tokio::sync::Notify::new());
        let watch = {
            let records = records.clone();
            let synced = synced.clone();
            tokio::spawn(async move {
                let api: Api<Pod> = Api::all(client);
                let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let now = Instant::now();
                    let mut records = records.lock().unwrap();
                    match event {
                        Ok(Event::Apply(p) | Event::InitApply(p)) => observe(&mut records, &p, now),
                        Ok(Event::Delete(p)) => {
                            observe(&mut records, &p, now);
                            if let Some(r) = p.metadata.uid.as_ref().and_then(|uid| records.get_mut(uid)) {
                                r.deleting.get_or_insert(now);
                                r.gone.get_or_insert(now);
                            }
                        }
                        Ok(Event::InitDone) => synced.notify_one(),
                        Ok(Event::Init) => {}
                        Err(e) => eprintln!("pod recorder: watch error (retried): {e}"),
                    }
                }
            })
        };
        let sampler = {
            let (records, samples) = (records.clone(), samples.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let now = Instant::now();
                    let sample = sample(&records.lock().unwrap(), now);
                    samples.lock().unwrap().push(sample);
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(30), synced.notified())
            .await
            .expect("the pod watch did not list the pods within 30 s");
        PodRecorder { records, samples, tasks: vec![watch, sampler] }
    }

    pub fn records(&self) -> Vec<PodRecord> {
        self.records.lock().unwrap().values().cloned().collect()
    }

    /// Samples taken in `[from, to]`.
    pub fn samples(&self, from: Instant, to: Instant) -> Vec<Sample> {
        self.samples.lock().unwrap().iter().filter(|s| s.at >= from && s.at <= to).copied().collect()
    }

    /// The counts right now.
    pub fn now(&self) -> Sample {
        sample(&self.records.lock().unwrap(), Instant::now())
    }
}

impl Drop for PodRecorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn sample(records: &HashMap<String, PodRecord>, at: Instant) -> Sample {
    let mut s = Sample {
        at,
        workers: 0,
        worker_cpu_milli: 0,
        running_worker_cpu_milli: 0,
        online_running: 0,
        online_unschedulable: 0,
        workers_pending: 0,
    };
    for r in records.values() {
        match r.role {
            Role::Worker { .. } => {
                if r.running_at(at) {
                    s.workers += 1;
                    s.running_worker_cpu_milli += r.cpu_milli + r.batch_cpu_milli;
                }
                s.workers_pending += usize::from(r.pending_at(at));
                if r.on_node_at(at) {
                    s.worker_cpu_milli += r.cpu_milli;
                }
            }
            Role::Online => {
                s.online_running += usize::from(r.running_at(at));
                s.online_unschedulable += usize::from(r.unschedulable_at(at));
            }
        }
    }
    s
}

fn role(p: &Pod) -> Option<Role> {
    let labels = p.metadata.labels.as_ref()?;
    if labels.get(ROLE_LABEL).is_some_and(|r| r == "worker") {
        return labels.get(JOB_LABEL).map(|job| Role::Worker { job: job.clone() });
    }
    (labels.get(ONLINE_LABEL.0).map(String::as_str) == Some(ONLINE_LABEL.1)).then_some(Role::Online)
}

fn condition(p: &Pod, type_: &str, status: &str, reason: &str) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == status && c.reason.as_deref() == Some(reason))
}

fn observe(records: &mut HashMap<String, PodRecord>, p: &Pod, now: Instant) {
    let (Some(uid), Some(role)) = (p.metadata.uid.clone(), role(p)) else { return };
    let r = records.entry(uid).or_insert_with(|| PodRecord {
        name: p.metadata.name.clone().unwrap_or_default(),
        role,
        cpu_milli: pod_requests(p).map(|r| r.cpu_milli).unwrap_or(0),
        batch_cpu_milli: requested(p, BatchNames::Colocate).map(|r| r.cpu_milli).unwrap_or(0),
        seen: now,
        unschedulable: None,
        bound: None,
        deleting: None,
        gone: None,
        preempted: None,
    });
    // Before `deleting` is updated: was it live when the scheduler picked it?
    if r.preempted.is_none() && condition(p, "DisruptionTarget", "True", "PreemptionByScheduler") {
        let live = r.deleting.is_none() && p.metadata.deletion_timestamp.is_none();
        r.preempted = Some((now, live));
    }
    if r.unschedulable.is_none() && condition(p, "PodScheduled", "False", "Unschedulable") {
        r.unschedulable = Some(now);
    }
    if r.bound.is_none() && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
        r.bound = Some(now);
    }
    if r.deleting.is_none() && p.metadata.deletion_timestamp.is_some() {
        r.deleting = Some(now);
    }
}
