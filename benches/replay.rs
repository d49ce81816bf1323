//! Replay speed: simulated seconds per wall-clock second, for the `colocate` policy alone and
//! for all five policies side by side (as `colocate replay` runs them). philly-burst is the
//! largest shipped case: 300 trace jobs over 3 simulated days at a 10 s step, which should
//! replay under 10 s for all five policies on a developer's machine so that trying a policy
//! stays interactive.
//!
//! `cargo bench --bench replay` (criterion reports "elem/s" = simulated seconds per second)

use std::hint::black_box;
use std::path::PathBuf;

use colocate::sim::{replay, Policy, Scenario};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    Scenario::load(&path).expect("shipped scenario loads")
}

fn replay_speed(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    for name in ["elasticdl-nginx.yaml", "diurnal-day.yaml", "philly-burst.yaml"] {
        let s = scenario(name);
        group.throughput(Throughput::Elements(s.spec.duration.as_secs()));
        group.bench_function(format!("{name}/colocate"), |b| {
            b.iter(|| black_box(replay(&s, &[Policy::Colocate], &|_| {})))
        });
        group.bench_function(format!("{name}/all-policies"), |b| {
            b.iter(|| black_box(replay(&s, &Policy::ALL, &|_| {})))
        });
    }
    group.finish();
}

criterion_group!(benches, replay_speed);
criterion_main!(benches);
