//! Scenario and report v1.1 (docs/scenario-format.md): jobs from a CSV trace, `gang_workers`, the
//! `gang-backfill` policy, and the completion-time, queueing and GPU figures of the report.

use std::path::Path;

use super::engine::PolicyRun;
use super::policy::Policy;
use super::report::nearest_rank;
use super::scenario::Scenario;
use super::tests::replay;

/// One 8-CPU node. `first` (five workers) finishes in 10 s; `big` arrives at 1 s and needs six
/// workers at once, so it must wait for `first`; `small` arrives at 2 s and needs two, which
/// fit beside `first` at once.
const BLOCKED: &str = r#"
version: 1
name: blocked
duration: 1m
cluster: {nodes: [{pool: n, count: 1, allocatable: {cpu: "8", memory: 32Gi}}]}
jobs:
  - {name: first, worker: {cpu: "1", memory: 1Gi}, min_workers: 5, max_workers: 5, throughput_per_worker: 10, work: 500}
  - {name: big, arrival: 1s, worker: {cpu: "1", memory: 1Gi}, min_workers: 1, max_workers: 8, gang_workers: 6,
     throughput_per_worker: 10, work: 600}
  - {name: small, arrival: 2s, worker: {cpu: "1", memory: 1Gi}, min_workers: 1, max_workers: 2,
     throughput_per_worker: 10, work: 200}
"#;

#[test]
fn gang_blocks_small_jobs_behind_a_big_one_and_backfill_does_not() {
    let started = |run: &PolicyRun| -> Vec<Option<f64>> { run.result.jobs.iter().map(|j| j.started_at_s).collect() };
    // FIFO: `small` fits from 2 s but waits behind `big` until `first` is done (kube-batch #561).
    let gang = replay(BLOCKED, Policy::Gang);
    assert_eq!(started(&gang), [Some(0.0), Some(10.0), Some(10.0)]);
    // `big` runs at its gang_workers (6), not max_workers (8).
    assert_eq!(gang.timeline[12].workers, [0, 6, 2]);
    // Backfill starts `small` as it arrives; `big` still waits for its six.
    let backfill = replay(BLOCKED, Policy::GangBackfill);
    assert_eq!(started(&backfill), [Some(0.0), Some(10.0), Some(2.0)]);
    assert!(backfill.timeline.iter().all(|r| [0, 6].contains(&r.workers[1]) && [0, 2].contains(&r.workers[2])));
    // Queueing: (0 + 9 + 8) / 3 under gang, (0 + 9 + 0) / 3 with backfill; small's JCT 18 s vs 10 s.
    assert_eq!(gang.result.avg_queueing_s, Some(17.0 / 3.0));
    assert_eq!(backfill.result.avg_queueing_s, Some(3.0));
    let jct = |run: &PolicyRun| run.result.jobs[2].completed_at_s.map(|c| c - 2.0);
    assert_eq!((jct(&gang), jct(&backfill)), (Some(18.0), Some(10.0)));
    assert!(backfill.result.avg_jct_s < gang.result.avg_jct_s);
    assert_eq!((gang.result.unfinished_jobs, backfill.result.unfinished_jobs), (0, 0));
}

#[test]
fn gang_workers_must_lie_between_the_floor_and_the_ceiling() {
    let yaml = BLOCKED.replace("gang_workers: 6", "gang_workers: 9");
    let err = Scenario::parse(Path::new("tiny.yaml"), &yaml).unwrap_err().to_string();
    assert!(err.contains("jobs[1].gang_workers") && err.contains("[1, 8]"), "{err}");
}

#[test]
fn a_job_never_started_queues_until_the_end_and_counts_as_unfinished() {
    // On a 7-CPU node `big` needs all 8 at once: never started under gang-backfill.
    let yaml = BLOCKED.replace("gang_workers: 6", "gang_workers: 8").replace("cpu: \"8\"", "cpu: \"7\"");
    let run = replay(&yaml, Policy::GangBackfill);
    let big = &run.result.jobs[1];
    assert_eq!((big.started_at_s, big.completed_at_s), (None, None));
    assert_eq!(run.result.unfinished_jobs, 1);
    // Queueing counts it with duration - arrival = 59 s: (0 + 59 + 0) / 3.
    assert_eq!(run.result.avg_queueing_s, Some(59.0 / 3.0));
    assert_eq!(run.result.p95_queueing_s, Some(59.0));
    // JCT is over the jobs that completed only; censored, `big` counts until the end.
    assert_eq!(run.result.avg_jct_s, Some((10.0 + 10.0) / 2.0));
    assert_eq!(run.result.avg_jct_censored_s, Some((10.0 + 59.0 + 10.0) / 3.0));
    assert_eq!(run.result.p95_jct_censored_s, Some(59.0));
}

#[test]
fn nearest_rank_percentiles() {
    let xs = [15.0, 20.0, 35.0, 40.0, 50.0];
    assert_eq!(nearest_rank(&xs, 5.0), Some(15.0));
    assert_eq!(nearest_rank(&xs, 30.0), Some(20.0));
    assert_eq!(nearest_rank(&xs, 50.0), Some(35.0));
    assert_eq!(nearest_rank(&xs, 95.0), Some(50.0));
    assert_eq!(nearest_rank(&[], 50.0), None);
}

#[test]
fn gpu_allocation_counts_requested_gpus_and_is_null_without_gpus() {
    // Two 8-GPU nodes; an inference service holds 2 GPUs; a rigid job of 4 one-GPU workers.
    let yaml = r#"
version: 1
name: gpus
duration: 20s
cluster: {nodes: [{pool: g, count: 2, allocatable: {cpu: "64", memory: 256Gi, nvidia.com/gpu: 8}}]}
services:
  - name: llm
    replica: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 1}
    replica_capacity_rps: 10
    latency: {base_p99: 200ms, slo_p99: 2s}
    hpa: {min_replicas: 2, max_replicas: 4, target_utilization: 0.6}
    load: {constant: 10}
jobs:
  - {name: train, worker: {cpu: "4", memory: 24Gi, nvidia.com/gpu: 1}, min_workers: 1, max_workers: 4,
     throughput_per_worker: 1}
"#;
    let gang = replay(yaml, Policy::Gang);
    assert_eq!(gang.result.avg_gpu_allocation, Some(6.0 / 16.0));
    let online = replay(yaml, Policy::OnlineOnly);
    assert_eq!(online.result.avg_gpu_allocation, Some(2.0 / 16.0));
    assert_eq!(replay(BLOCKED, Policy::Gang).result.avg_gpu_allocation, None);
}

/// A scenario beside `csv`, reading it as `job_trace` with `extra` keys.
fn with_trace(csv: &str, extra: &str) -> Result<Scenario, String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jobs.csv"), csv).unwrap();
    let yaml = format!(
        r#"
version: 1
name: traced
duration: 2h
cluster: {{nodes: [{{pool: g, count: 2, allocatable: {{cpu: "64", memory: 256Gi, nvidia.com/gpu: 8}}}}]}}
jobs:
  - {{name: own-0, worker: {{cpu: "1"}}, min_workers: 1, max_workers: 2, throughput_per_worker: 1}}
job_trace:
  file: jobs.csv
  submit_column: timestamp
  duration_column: duration
  workers_column: num_gpus
  worker: {{cpu: "4", memory: 24Gi, nvidia.com/gpu: 1}}
  {extra}
"#
    );
    Scenario::parse(&dir.path().join("s.yaml"), &yaml).map_err(|e| e.to_string())
}

const PHILLY_LIKE: &str = "timestamp,duration,num_gpus,cluster
2017-10-09 07:01:55,600.0,1,a
2017-10-09 06:13:03,3600.0,4,b
2017-10-09 06:13:03,1200.0,0,c
2017-10-09 06:20:00,60.0,2,d
2017-10-09 06:30:00,,8,e
2017-10-09 06:40:00,900.0,16,f
";

#[test]
fn a_job_trace_becomes_jobs_in_submit_order() {
    let s =
        with_trace(PHILLY_LIKE, "scaling_efficiency: 0.5\n  max_workers_factor: 1.5\n  max_workers_cap: 8").unwrap();
    let jobs = &s.spec.jobs;
    // `own` first, then the kept rows by submit time: the 0-GPU and the empty-duration rows
    // are dropped (and said so).
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["own-0", "trace-0", "trace-1", "trace-2", "trace-3"]);
    assert!(s.warnings.iter().any(|w| w.contains("2 rows dropped")), "{:?}", s.warnings);
    let t = |i: usize| &jobs[i + 1];
    let arrivals: Vec<f64> = (0..4).map(|i| t(i).arrival.as_secs_f64()).collect();
    assert_eq!(arrivals, [0.0, 417.0, 1617.0, 2932.0]);
    // trace-0: 4 GPUs for an hour: gang 4, floor 1, ceiling ceil(4 * 1.5) = 6;
    // work = 3600 * 4^0.5, so a rigid run at 4 workers takes the traced hour.
    let j = t(0);
    assert_eq!((j.gang_workers, j.min_workers, j.max_workers), (Some(4), 1, 6));
    assert!((j.work.unwrap() - 7200.0).abs() < 1e-9, "{:?}", j.work);
    assert_eq!(j.throughput_per_worker, 1.0);
    // trace-2 asked for 16 GPUs: clipped to the cap of 8, as is its ceiling.
    assert_eq!((t(2).gang_workers, t(2).max_workers), (Some(8), 8));
    assert!((t(2).work.unwrap() - 900.0 * 8f64.sqrt()).abs() < 1e-9, "{:?}", t(2).work);
}

#[test]
fn skip_limit_and_speedup_shape_the_trace() {
    // Skip the first 10 minutes after the earliest (06:13:03): 06:20:00 is dropped too.
    let s = with_trace(PHILLY_LIKE, "skip: 10m\n  limit: 1\n  speedup: 2\n  name_prefix: philly").unwrap();
    let t = &s.spec.jobs[1..];
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].name, "philly-0");
    // 06:40:00, 900 s at 16 workers, halved: the first kept row arrives at 0.
    assert_eq!((t[0].arrival.as_secs_f64(), t[0].work), (0.0, Some(450.0 * 16.0)));
}

#[test]
fn a_bad_job_trace_is_refused_naming_what_is_wrong() {
    let err = with_trace(PHILLY_LIKE.replace("num_gpus", "gpus").as_str(), "").unwrap_err();
    assert!(err.contains("job_trace.workers_column") && err.contains("`num_gpus`"), "{err}");
    let err = with_trace(&PHILLY_LIKE.replace("2017-10-09 06:20:00", "yesterday"), "").unwrap_err();
    assert!(err.contains("jobs.csv:5") && err.contains("`yesterday`"), "{err}");
    let err = with_trace(PHILLY_LIKE, "name_prefix: own").unwrap_err();
    assert!(err.contains("job_trace.name_prefix"), "{err}");
    let err = with_trace(PHILLY_LIKE, "limit: 0").unwrap_err();
    assert!(err.contains("job_trace.limit"), "{err}");
    let err = with_trace(PHILLY_LIKE, "max_workers_factor: 0.5").unwrap_err();
    assert!(err.contains("job_trace.max_workers_factor"), "{err}");
    let err = with_trace("timestamp,duration,num_gpus\n1,0,1\n", "").unwrap_err();
    assert!(err.contains("no job left"), "{err}");
}

/// One 8-CPU node and a stream of small rigid-floor jobs, one every 10 s for 10 minutes, each
/// taking 3 CPUs for 20 s: two at a time hold 6 CPUs. `big` needs 6 at once and arrives at 5 s.
fn small_stream(reservation_after: &str) -> String {
    let mut yaml = format!(
        r#"
version: 1
name: stream
duration: 15m
cluster: {{nodes: [{{pool: n, count: 1, allocatable: {{cpu: "8", memory: 32Gi}}}}]}}
controller: {{waiting_reservation_after: {reservation_after}}}
jobs:
  - {{name: big, arrival: 5s, worker: {{cpu: "1"}}, min_workers: 6, max_workers: 6, throughput_per_worker: 10, work: 600}}
"#
    );
    for i in 0..60 {
        yaml.push_str(&format!(
            "  - {{name: s{i}, arrival: {}s, worker: {{cpu: \"1\"}}, min_workers: 3, max_workers: 3, \
             throughput_per_worker: 10, work: 600}}\n",
            i * 10
        ));
    }
    yaml
}

#[test]
fn a_big_job_is_not_starved_by_a_stream_of_small_ones() {
    let started = |after: &str| replay(&small_stream(after), Policy::Colocate).result.jobs[0].started_at_s;
    // Without a reservation in time, there are never 6 CPUs free while the stream lasts.
    let starved = started("1h").expect("big runs once the stream ends");
    assert!(starved >= 590.0, "big started at {starved} s");
    // Waiting 1 minute earns it a reservation: the room drains as small jobs finish, and it
    // starts once its floor has fitted for the growth stabilization window (60 s).
    let served = started("1m").expect("big starts");
    eprintln!("big started at {starved} s without a reservation, {served} s with one");
    assert!(served < 200.0, "big started at {served} s");
}
