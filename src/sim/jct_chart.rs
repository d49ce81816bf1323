//! The completion-time CDF of `replay --out` (jct_cdf.svg): per policy, the fraction of the
//! jobs that completed within each time, on a log time axis (trace JCTs span seconds to days),
//! and jct.csv, one row per job and policy. Plain SVG, as chart.svg.

use std::fmt::Write as _;

use super::chart::{escape, fmt_time, legend, LEFT, PANEL_W};
use super::report::{csv_quote, PolicyResult};

const PANEL_H: f64 = 320.0;
const TOP: f64 = 40.0;
const COLORS: [&str; 5] = ["#f28e2b", "#4e79a7", "#59a14f", "#b07aa1", "#9c755f"];

/// Completion times of each policy's completed jobs, sorted; policies with none are left out.
pub fn completion_times(results: &[PolicyResult]) -> Vec<(String, Vec<f64>)> {
    results
        .iter()
        .map(|r| {
            let mut jct: Vec<f64> =
                r.jobs.iter().filter_map(|j| j.completed_at_s.map(|c| (c - j.arrival_s).max(0.0))).collect();
            jct.sort_by(f64::total_cmp);
            (r.policy.clone(), jct)
        })
        .filter(|(_, jct)| !jct.is_empty())
        .collect()
}

/// The CDF chart, or `None` when no policy completed a job.
pub fn render_jct_cdf(title: &str, series: &[(String, Vec<f64>)]) -> Option<String> {
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let (lo, hi) = all.fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| (lo.min(v.max(1.0)), hi.max(v)));
    if !lo.is_finite() {
        return None;
    }
    // Whole decades around the data.
    let (d0, d1) = (lo.log10().floor(), hi.max(lo * 10.0).log10().ceil());
    let x = |t: f64| LEFT + (t.max(1.0).log10() - d0) / (d1 - d0) * PANEL_W;
    let y = |f: f64| TOP + PANEL_H - f * PANEL_H;
    let width = LEFT + PANEL_W + 200.0;
    let height = TOP + PANEL_H + 50.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}</text>"#, escape(title));
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>"##
    );
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#444">{:.0}%</text>"##,
            LEFT - 6.0,
            y(frac) + 4.0,
            frac * 100.0
        );
    }
    let mut decade = d0;
    while decade <= d1 + 1e-9 {
        let t = 10f64.powf(decade);
        let label = if t < 60.0 { format!("{t:.0}s") } else { fmt_time(t) };
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">{label}</text>"##,
            x(t),
            TOP + PANEL_H + 16.0
        );
        decade += 1.0;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">job completion time (log scale); fraction of the jobs that completed</text>"##,
        LEFT + PANEL_W / 2.0,
        TOP + PANEL_H + 36.0
    );
    let mut items = Vec::new();
    for (k, (policy, jct)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let n = jct.len() as f64;
        let mut d = format!("M{:.1},{:.1} ", x(jct[0]), y(0.0));
        for (i, t) in jct.iter().enumerate() {
            let _ = write!(d, "L{:.1},{:.1} L{:.1},{:.1} ", x(*t), y(i as f64 / n), x(*t), y((i + 1) as f64 / n));
        }
        let _ = writeln!(
            svg,
            r#"<path class="cdf" d="{d}" fill="none" stroke="{color}" stroke-width="1.6"><title>{}</title></path>"#,
            escape(policy)
        );
        items.push((color, format!("{policy} ({} jobs)", jct.len())));
    }
    legend(&mut svg, TOP, &items);
    svg.push_str("</svg>\n");
    Some(svg)
}

/// jct.csv: policy, job, arrival, start and completion (empty when it never did), JCT.
pub fn jct_csv(results: &[PolicyResult]) -> String {
    let mut out = String::from("policy,job,arrival_s,started_at_s,completed_at_s,jct_s\n");
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.1}"));
    for r in results {
        for j in &r.jobs {
            let jct = j.completed_at_s.map(|c| c - j.arrival_s);
            let _ = writeln!(
                out,
                "{},{},{:.1},{},{},{}",
                r.policy,
                csv_quote(&j.name),
                j.arrival_s,
                opt(j.started_at_s),
                opt(j.completed_at_s),
                opt(jct)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::report::JobResult;

    fn result(policy: &str, done: &[Option<f64>]) -> PolicyResult {
        let jobs = done
            .iter()
            .enumerate()
            .map(|(i, c)| JobResult {
                name: format!("j{i}"),
                arrival_s: 10.0,
                started_at_s: c.map(|_| 10.0),
                completed_at_s: *c,
                avg_workers: 1.0,
            })
            .collect();
        PolicyResult {
            policy: policy.into(),
            avg_cpu_allocation: 0.0,
            time_above_target: 0.0,
            slo_violation_s: 0.0,
            pending_online_pod_s: 0.0,
            forced_preemptions: 0,
            scheduler_preemptions: 0,
            controller_forced_preemptions: 0,
            rescale_events: 0,
            training_samples: 0.0,
            makespan_s: None,
            avg_jct_s: None,
            p50_jct_s: None,
            p95_jct_s: None,
            unfinished_jobs: 0,
            avg_queueing_s: None,
            p95_queueing_s: None,
            avg_gpu_allocation: None,
            jobs,
        }
    }

    #[test]
    fn one_cdf_per_policy_that_completed_a_job() {
        let results = [
            result("colocate", &[Some(110.0), Some(1010.0), None]),
            result("gang", &[Some(5010.0)]),
            result("online-only", &[]),
        ];
        let series = completion_times(&results);
        assert_eq!(series, [("colocate".to_string(), vec![100.0, 1000.0]), ("gang".to_string(), vec![5000.0])]);
        let svg = render_jct_cdf("t", &series).unwrap();
        assert_eq!(svg.matches(r#"class="cdf""#).count(), 2);
        assert!(svg.contains("colocate (2 jobs)") && svg.trim_end().ends_with("</svg>"));
        assert!(render_jct_cdf("t", &completion_times(&[result("gang", &[None])])).is_none());
        let csv = jct_csv(&results);
        assert_eq!(csv.lines().count(), 1 + 4);
        assert!(csv.contains("colocate,\"j2\",10.0,,,\n"), "{csv}");
        assert!(csv.contains("gang,\"j0\",10.0,10.0,5010.0,5000.0\n"), "{csv}");
    }
}
