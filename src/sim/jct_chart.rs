//! jct_cdf.svg and jct.csv of `replay --out`. With a handful of jobs or more, the completion-time
//! CDF per policy, the fraction of the jobs completed within each time on a log time axis (trace
//! JCTs span seconds to days). With fewer, a CDF says nothing a bar does not: each job is a bar
//! from its arrival, queued then running, up to its completion or the end of the run. Plain SVG.

use std::fmt::Write as _;

use super::axis::{duration_label, log_time_ticks, time_label, time_ticks};
use super::report::{csv_quote, PolicyResult};
use super::svg::{escape, legend_rows, open, text, vertical_caption, Swatch};

/// Below this many jobs with work, jct_cdf.svg draws a bar per job instead of a CDF.
pub const FEW_JOBS: usize = 5;
const WIDTH: f64 = 1100.0;
const LEFT: f64 = 120.0;
const RIGHT: f64 = 1060.0;
const PANEL_H: f64 = 320.0;
const LANE_H: f64 = 22.0;
const RUNNING: &str = "#4e79a7";
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

/// jct_cdf.svg, or `None` when no policy completed a job. `has_work[j]`: job `j` (in the order of
/// each result's `jobs`) has `work`, so it can complete.
pub fn render_jct(title: &str, results: &[PolicyResult], has_work: &[bool], duration_s: f64) -> Option<String> {
    let series = completion_times(results);
    if series.is_empty() {
        return None;
    }
    if has_work.iter().filter(|w| **w).count() < FEW_JOBS {
        Some(render_bars(title, results, has_work, duration_s))
    } else {
        render_jct_cdf(title, &series)
    }
}

/// The CDF chart, or `None` when no policy completed a job.
pub fn render_jct_cdf(title: &str, series: &[(String, Vec<f64>)]) -> Option<String> {
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let (lo, hi) = all.fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| (lo.min(v.max(1.0)), hi.max(v)));
    if !lo.is_finite() {
        return None;
    }
    let mut svg = String::new();
    text(&mut svg, LEFT, 24.0, "start", r#"font-size="16" font-weight="bold""#, title);
    let items: Vec<(Swatch, String)> = series
        .iter()
        .enumerate()
        .map(|(k, (p, jct))| (Swatch::Line(COLORS[k % COLORS.len()]), format!("{p} ({} jobs completed)", jct.len())))
        .collect();
    let top = legend_rows(&mut svg, LEFT, RIGHT, 48.0, &items) + 4.0;
    // Whole decades around the data.
    let (d0, d1) = (lo.log10().floor(), hi.max(lo * 10.0).log10().ceil());
    let x = |t: f64| LEFT + (t.max(1.0).log10() - d0) / (d1 - d0) * (RIGHT - LEFT);
    let y = |f: f64| top + PANEL_H - f * PANEL_H;
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{top:.1}" width="{:.1}" height="{PANEL_H}" fill="none" stroke="#888"/>"##,
        RIGHT - LEFT
    );
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        text(&mut svg, LEFT - 6.0, y(frac) + 4.0, "end", r##"fill="#444""##, &format!("{:.0}%", frac * 100.0));
    }
    vertical_caption(&mut svg, LEFT - 50.0, top + PANEL_H / 2.0, "jobs completed within the time (%)");
    time_axis(
        &mut svg,
        log_time_ticks(10f64.powf(d0), 10f64.powf(d1)),
        x,
        (top, PANEL_H),
        "job completion time, arrival to completion (log scale; h = hours, m = minutes, s = seconds)",
    );
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
    }
    Some(document(svg, top + PANEL_H + 56.0))
}

/// The time axis under a plot area (`top`, `height`): a grid line and a label at each tick,
/// and the caption below them.
fn time_axis(
    svg: &mut String,
    ticks: impl IntoIterator<Item = f64>,
    x: impl Fn(f64) -> f64,
    (top, height): (f64, f64),
    caption: &str,
) {
    for t in ticks {
        grid(svg, x(t), top, height);
        text(svg, x(t), top + height + 16.0, "middle", r##"fill="#444""##, &time_label(t));
    }
    text(svg, (LEFT + RIGHT) / 2.0, top + height + 38.0, "middle", r##"fill="#444""##, caption);
}

/// A bar per job with work and policy that ran jobs: queued (grey) from arrival to start, then
/// running to completion, or hatched to the end of the run.
fn render_bars(title: &str, results: &[PolicyResult], has_work: &[bool], duration_s: f64) -> String {
    let ran: Vec<&PolicyResult> = results.iter().filter(|r| !r.jobs.is_empty()).collect();
    let end = |j: &super::report::JobResult| j.completed_at_s.unwrap_or(duration_s) - j.arrival_s;
    let most = ran
        .iter()
        .flat_map(|r| r.jobs.iter().zip(has_work).filter(|(_, w)| **w).map(|(j, _)| end(j)))
        .fold(1.0, f64::max);
    // The longest bar takes 70% of the width: its label goes right of it.
    let t1 = most / 0.7;
    let mut svg = String::new();
    text(&mut svg, LEFT, 24.0, "start", r#"font-size="16" font-weight="bold""#, title);
    let items = [
        (Swatch::Fill("#ccc"), "queued (arrival to min_workers running)".to_string()),
        (Swatch::Fill(RUNNING), "running, until completion".to_string()),
        (Swatch::Fill("url(#unfinished)"), "running, not finished when the run ended".to_string()),
    ];
    let top = legend_rows(&mut svg, LEFT, RIGHT, 48.0, &items) + 4.0;
    let lanes = ran.len() * has_work.iter().filter(|w| **w).count();
    let height = lanes as f64 * LANE_H + ran.len() as f64 * 8.0;
    let x = |t: f64| LEFT + t.clamp(0.0, t1) / t1 * (RIGHT - LEFT);
    let _ = writeln!(
        svg,
        r##"<defs><pattern id="unfinished" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#eee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#999" stroke-width="2"/></pattern></defs>"##
    );
    time_axis(
        &mut svg,
        time_ticks(0.0, t1, 8),
        x,
        (top, height),
        "time since the job's arrival (h = hours, m = minutes, s = seconds)",
    );
    let mut y = top;
    for r in &ran {
        let _ = writeln!(svg, r#"<g class="cdf">"#);
        text(&mut svg, LEFT - 8.0, y + 15.0, "end", r#"font-weight="bold""#, &r.policy);
        for (j, _) in r.jobs.iter().zip(has_work).filter(|(_, w)| **w) {
            let started = j.started_at_s.map_or(end(j), |s| s - j.arrival_s);
            let (bar_y, bar_h) = (y + 4.0, LANE_H - 8.0);
            let _ = writeln!(
                svg,
                r##"<rect x="{:.1}" y="{bar_y:.1}" width="{:.1}" height="{bar_h}" fill="#ccc"/>"##,
                x(0.0),
                x(started) - x(0.0)
            );
            let fill = if j.completed_at_s.is_some() { RUNNING } else { "url(#unfinished)" };
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{bar_y:.1}" width="{:.1}" height="{bar_h}" fill="{fill}"/>"#,
                x(started),
                x(end(j)) - x(started)
            );
            let label = match (j.started_at_s, j.completed_at_s) {
                (_, Some(_)) => format!("{}: {}", j.name, duration_label(end(j))),
                (Some(_), None) => format!("{}: not finished after {}", j.name, duration_label(end(j))),
                (None, None) => format!("{}: not started after {}", j.name, duration_label(end(j))),
            };
            text(&mut svg, x(end(j)) + 6.0, y + 15.0, "start", "", &label);
            y += LANE_H;
        }
        let _ = writeln!(svg, "</g>");
        y += 8.0;
    }
    document(svg, top + height + 56.0)
}

fn grid(svg: &mut String, x: f64, top: f64, h: f64) {
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000" stroke-opacity="0.1"/>"##,
        top + h
    );
}

fn document(body: String, height: f64) -> String {
    let mut svg = open(WIDTH, height);
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    svg
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
        PolicyResult { policy: policy.into(), jobs, ..PolicyResult::default() }
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
        assert!(svg.contains("colocate (2 jobs completed)") && svg.trim_end().ends_with("</svg>"));
        // Ticks at round times with units, between whole decades around the data (100 s to 10,000 s).
        for tick in [">5m<", ">30m<", ">2h<"] {
            assert!(svg.contains(tick), "{tick}: {svg}");
        }
        assert!(render_jct_cdf("t", &completion_times(&[result("gang", &[None])])).is_none());
        let csv = jct_csv(&results);
        assert_eq!(csv.lines().count(), 1 + 4);
        assert!(csv.contains("colocate,\"j2\",10.0,,,\n"), "{csv}");
        assert!(csv.contains("gang,\"j0\",10.0,10.0,5010.0,5000.0\n"), "{csv}");
    }

    #[test]
    fn a_few_jobs_are_bars_not_a_cdf() {
        // One job with work (and one without, which never completes), as in diurnal-day.
        let mut queued = result("gang", &[None, None]);
        queued.jobs[0].started_at_s = Some(4010.0);
        let results = [
            result("colocate", &[Some(3610.0), None]),
            queued,
            result("gang-backfill", &[None]),
            result("online-only", &[]),
        ];
        let work = [true, false];
        let svg = render_jct("t", &results, &work, 7200.0).unwrap();
        // A group per policy that ran jobs, a bar per job with work in it.
        assert_eq!(svg.matches(r#"class="cdf""#).count(), 3);
        assert!(svg.contains(">j0: 1h<"), "{svg}");
        assert!(svg.contains(">j0: not finished after 2h<"), "{svg}");
        assert!(svg.contains(">j0: not started after 2h<"), "{svg}");
        assert!(!svg.contains(">j1"), "a job without work has no bar");
        assert!(svg.contains(r#"fill="url(#unfinished)""#));
        assert!(!svg.contains("<path"), "no CDF line");
        // Five jobs with work make a CDF again; none completed, no chart.
        let many = [result("colocate", &[Some(20.0); 5])];
        assert!(render_jct("t", &many, &[true; 5], 100.0).unwrap().contains(r#"<path class="cdf""#));
        assert!(render_jct("t", &[result("gang", &[None])], &[true], 100.0).is_none());
    }
}
