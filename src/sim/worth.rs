//! "Is it worth it", comparable across policies: the CPU-hours (GPU-hours on a cluster with GPUs)
//! given to training, and their share of the idle room the services alone leave, that is, of the
//! allocatable capacity `online-only` does not request over the run. `training_samples` does not
//! compare: samples of different jobs cost differently.
//!
//! Also the line printed under the table when no policy can differ on the services' columns.

use super::report::{PolicyResult, TimelineRow, WorthColumns};
use super::spec::ScenarioFile;

/// The resource training is measured in: GPUs where the cluster has any (the scarce one there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Cpu,
    Gpu,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Cpu => "CPU",
            Unit::Gpu => "GPU",
        }
    }
}

/// The cluster's allocatable CPU and GPUs (replay's cluster is fixed for the run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    pub cpu_cores: f64,
    pub gpus: u64,
}

impl Capacity {
    pub fn of(spec: &ScenarioFile) -> Capacity {
        let (mut cpu_cores, mut gpus) = (0.0, 0);
        for pool in &spec.cluster.nodes {
            let r = pool.allocatable.resources();
            cpu_cores += f64::from(pool.count) * r.cpu_cores();
            gpus += u64::from(pool.count) * r.gpu.max(0) as u64;
        }
        Capacity { cpu_cores, gpus }
    }

    pub fn unit(&self) -> Unit {
        if self.gpus > 0 {
            Unit::Gpu
        } else {
            Unit::Cpu
        }
    }

    /// Of `unit`: (held by system and online pods, held by workers) in one step.
    pub fn split(&self, r: &TimelineRow, unit: Unit) -> (f64, f64) {
        match unit {
            Unit::Cpu => (r.system_cpu + r.online_cpu, r.training_cpu),
            Unit::Gpu => {
                let training = r.training_gpu as f64;
                ((r.gpu_allocation * self.gpus as f64 - training).max(0.0), training)
            }
        }
    }

    pub fn total(&self, unit: Unit) -> f64 {
        match unit {
            Unit::Cpu => self.cpu_cores,
            Unit::Gpu => self.gpus as f64,
        }
    }
}

/// The seconds each row stands for: up to the next row, the last up to the end of the run (at
/// most one step).
pub fn row_seconds(rows: &[TimelineRow], duration_s: f64, step_s: f64) -> Vec<f64> {
    let mut out: Vec<f64> = rows.windows(2).map(|w| w[1].t - w[0].t).collect();
    if let Some(last) = rows.last() {
        let step = out.last().copied().unwrap_or(step_s);
        out.push(step.min(duration_s - last.t).max(0.0));
    }
    out
}

/// Hours of `unit` held by workers.
pub fn training_hours(rows: &[TimelineRow], duration_s: f64, step_s: f64, cap: &Capacity, unit: Unit) -> f64 {
    let dt = row_seconds(rows, duration_s, step_s);
    rows.iter().zip(dt).map(|(r, dt)| cap.split(r, unit).1 * dt).sum::<f64>() / 3600.0
}

/// Hours of `unit` that system and online pods leave unrequested in `rows` (an `online-only`
/// run: the room training could have without taking any from the services).
pub fn idle_room_hours(rows: &[TimelineRow], duration_s: f64, step_s: f64, cap: &Capacity, unit: Unit) -> f64 {
    let dt = row_seconds(rows, duration_s, step_s);
    let total = cap.total(unit);
    rows.iter().zip(dt).map(|(r, dt)| (total - cap.split(r, unit).0).max(0.0) * dt).sum::<f64>() / 3600.0
}

/// The table's worth columns for `results` and their `timelines` (same order), against the
/// `online_only` timeline (`None`: no share).
pub fn columns(
    results: &[PolicyResult],
    timelines: &[Vec<TimelineRow>],
    online_only: Option<&[TimelineRow]>,
    run: (f64, f64),
    cap: &Capacity,
    has_services: bool,
) -> WorthColumns {
    let (duration_s, step_s) = run;
    let unit = cap.unit();
    let hours: Vec<f64> = timelines.iter().map(|t| training_hours(t, duration_s, step_s, cap, unit)).collect();
    let room = online_only.map(|t| idle_room_hours(t, duration_s, step_s, cap, unit));
    let shares = hours.iter().map(|h| room.filter(|r| *r > 0.0).map(|r| h / r)).collect();
    WorthColumns { unit: unit.as_str(), hours, shares, note: no_contention_note(results, has_services, unit) }
}

/// One line for under the table when no policy can differ on the services' columns: there is no
/// service, or under every policy the services fared as under every other (same SLO seconds, no
/// online pod waited, no worker killed).
pub fn no_contention_note(results: &[PolicyResult], has_services: bool, unit: Unit) -> Option<String> {
    let unit = unit.as_str();
    if results.len() < 2 {
        return None;
    }
    if !has_services {
        return Some(format!(
            "No online service in this scenario: SLO viol. s and pending online pod s cannot differ between \
             policies; compare avg {unit} alloc, training {unit}-h and the jobs' columns."
        ));
    }
    let slo = results[0].slo_violation_s;
    let calm =
        results.iter().all(|r| r.slo_violation_s == slo && r.pending_online_pod_s == 0.0 && r.forced_preemptions == 0);
    calm.then(|| {
        "The jobs never contended with the services: every policy has the same SLO seconds, no online pod \
         waited and no worker was killed; the policies differ only in what training got."
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: f64, online: f64, training: f64, gpu_allocation: f64, training_gpu: u64) -> TimelineRow {
        TimelineRow {
            t,
            gpu_allocation,
            system_cpu: 1.0,
            online_cpu: online,
            training_cpu: training,
            training_gpu,
            ..TimelineRow::default()
        }
    }

    const CAP: Capacity = Capacity { cpu_cores: 10.0, gpus: 8 };

    #[test]
    fn training_hours_against_the_room_online_only_leaves() {
        // An hour in 30-minute steps on 10 CPUs: the services hold 1 + 3, then 1 + 5.
        let online_only = [row(0.0, 3.0, 0.0, 0.0, 0), row(1800.0, 5.0, 0.0, 0.0, 0)];
        let room = idle_room_hours(&online_only, 3600.0, 1800.0, &CAP, Unit::Cpu);
        assert!((room - (6.0 + 4.0) / 2.0).abs() < 1e-9, "{room}");
        let colocate = [row(0.0, 3.0, 5.0, 0.0, 0), row(1800.0, 5.0, 3.0, 0.0, 0)];
        assert!((training_hours(&colocate, 3600.0, 1800.0, &CAP, Unit::Cpu) - 4.0).abs() < 1e-9);
        // The last row stands for what is left of the run, not a whole step.
        assert_eq!(row_seconds(&colocate, 2000.0, 1800.0), [1800.0, 200.0]);
        assert_eq!(row_seconds(&colocate[..1], 600.0, 1800.0), [600.0]);
    }

    #[test]
    fn gpu_hours_count_the_workers_gpus_and_the_room_the_services_leave() {
        // 8 GPUs: the service holds 2; training 4 more (6 of 8 requested in all).
        let online_only = [row(0.0, 3.0, 0.0, 2.0 / 8.0, 0)];
        let colocate = [row(0.0, 3.0, 1.0, 6.0 / 8.0, 4)];
        assert_eq!(CAP.unit(), Unit::Gpu);
        assert!((idle_room_hours(&online_only, 3600.0, 3600.0, &CAP, Unit::Gpu) - 6.0).abs() < 1e-9);
        assert!((training_hours(&colocate, 3600.0, 3600.0, &CAP, Unit::Gpu) - 4.0).abs() < 1e-9);
    }

    fn result(policy: &str, slo: f64, pending: f64, killed: u64) -> PolicyResult {
        PolicyResult {
            policy: policy.into(),
            slo_violation_s: slo,
            pending_online_pod_s: pending,
            forced_preemptions: killed,
            ..PolicyResult::default()
        }
    }

    #[test]
    fn columns_give_each_policy_its_share_and_the_note_says_when_none_can_differ() {
        let online_only = vec![row(0.0, 3.0, 0.0, 0.0, 0)];
        let colocate = vec![row(0.0, 3.0, 3.0, 0.0, 0)];
        let results = [result("colocate", 5.0, 0.0, 0), result("online-only", 5.0, 0.0, 0)];
        let cap = Capacity { cpu_cores: 10.0, gpus: 0 };
        let cols =
            columns(&results, &[colocate, online_only.clone()], Some(&online_only), (3600.0, 3600.0), &cap, true);
        assert_eq!((cols.unit, cols.hours.as_slice()), ("CPU", [3.0, 0.0].as_slice()));
        assert_eq!(cols.shares, [Some(0.5), Some(0.0)]);
        assert!(cols.note.unwrap().starts_with("The jobs never contended"));
        let busy = [result("colocate", 5.0, 12.0, 0), result("online-only", 5.0, 0.0, 0)];
        assert_eq!(no_contention_note(&busy, true, Unit::Cpu), None);
        let slower = [result("colocate", 9.0, 0.0, 0), result("online-only", 5.0, 0.0, 0)];
        assert_eq!(no_contention_note(&slower, true, Unit::Cpu), None);
        let note = no_contention_note(&busy, false, Unit::Gpu).unwrap();
        assert!(note.starts_with("No online service") && note.contains("training GPU-h"), "{note}");
    }
}
