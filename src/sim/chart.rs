//! The co-location chart in the style of ElasticDL's figure: per policy, online CPU and
//! training CPU stacked over time with the total utilization and the target line, and under it
//! what that allocation cost the services: the worst service's p99 against its SLO and the
//! online pods waiting for a node (on one scale for every policy). Plain SVG.

use std::fmt::Write as _;

use super::report::TimelineRow;

pub(super) const PANEL_W: f64 = 900.0;
const PANEL_H: f64 = 200.0;
pub(super) const LEFT: f64 = 60.0;
const TOP: f64 = 40.0;
const GAP: f64 = 60.0;
/// The strip under each panel: p99 against SLO, and pending online pods.
const STRIP_TOP: f64 = 26.0;
const STRIP_H: f64 = 60.0;
/// The p99 axis runs from 0 to this many SLOs (higher values are drawn at the top).
const P99_AXIS_SLOS: f64 = 2.0;
/// Points drawn per series: plenty for a screen, small files for day-long replays.
const MAX_POINTS: usize = 1200;

/// `slos_ms[s]`: service `s`'s p99 objective, in the order of [`TimelineRow::services`].
pub fn render_svg(title: &str, panels: &[(&str, &[TimelineRow])], target: f64, slos_ms: &[f64]) -> String {
    let block = PANEL_H + STRIP_TOP + STRIP_H + GAP;
    let height = TOP + panels.len() as f64 * block + 20.0;
    let most_pending =
        panels.iter().flat_map(|(_, rows)| rows.iter().map(|r| r.pending_online_pods)).max().unwrap_or(0);
    let width = LEFT + PANEL_W + 160.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}</text>"#, escape(title));
    for (i, (policy, rows)) in panels.iter().enumerate() {
        let y0 = TOP + i as f64 * block + 10.0;
        panel(&mut svg, policy, rows, target, y0);
        strip(&mut svg, rows, slos_ms, most_pending, y0 + PANEL_H + STRIP_TOP);
    }
    svg.push_str("</svg>\n");
    svg
}

fn panel(svg: &mut String, policy: &str, rows: &[TimelineRow], target: f64, y0: f64) {
    let t_end = rows.last().map_or(1.0, |r| r.t).max(1.0);
    let x = |t: f64| LEFT + t / t_end * PANEL_W;
    let y = |frac: f64| y0 + PANEL_H - frac.clamp(0.0, 1.05) / 1.05 * PANEL_H;
    let stride = rows.len().div_ceil(MAX_POINTS).max(1);
    let sampled: Vec<&TimelineRow> = rows.iter().step_by(stride).collect();
    let total = |r: &TimelineRow| {
        if r.allocation > 0.0 {
            (r.system_cpu + r.online_cpu + r.training_cpu) / r.allocation
        } else {
            1.0
        }
    };
    let _ = writeln!(svg, r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#, y0 - 6.0, escape(policy));
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>"##
    );
    // Stacked areas: system+online (bottom), training (above it).
    let area = |lower: &dyn Fn(&TimelineRow) -> f64, upper: &dyn Fn(&TimelineRow) -> f64| {
        let mut d = String::new();
        for (k, r) in sampled.iter().enumerate() {
            let _ = write!(d, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, x(r.t), y(upper(r)));
        }
        for r in sampled.iter().rev() {
            let _ = write!(d, "L{:.1},{:.1} ", x(r.t), y(lower(r)));
        }
        d.push('Z');
        d
    };
    let online = |r: &TimelineRow| (r.system_cpu + r.online_cpu) / total(r);
    let all = |r: &TimelineRow| r.allocation;
    let _ = writeln!(svg, r##"<path d="{}" fill="#4e79a7" fill-opacity="0.8"/>"##, area(&|_| 0.0, &online));
    let _ = writeln!(svg, r##"<path d="{}" fill="#f28e2b" fill-opacity="0.8"/>"##, area(&online, &all));
    let mut line = String::new();
    for (k, r) in sampled.iter().enumerate() {
        let _ = write!(line, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, x(r.t), y(r.allocation));
    }
    let _ = writeln!(svg, r##"<path d="{line}" fill="none" stroke="#222" stroke-width="1.2"/>"##);
    let ty = y(target);
    let _ = writeln!(
        svg,
        r##"<line class="target" x1="{LEFT}" y1="{ty:.1}" x2="{}" y2="{ty:.1}" stroke="#d62728" stroke-dasharray="6,4"/>"##,
        LEFT + PANEL_W
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
    let ticks = 6;
    for k in 0..=ticks {
        let t = t_end * k as f64 / ticks as f64;
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
            x(t),
            y0 + PANEL_H + 16.0,
            fmt_time(t)
        );
    }
    let items =
        [("#4e79a7", "online + system"), ("#f28e2b", "training"), ("#222", "total allocation"), ("#d62728", "target")];
    legend(svg, y0, &items.map(|(c, l)| (c, l.to_string())));
}

/// A column of colour swatches and labels right of a panel whose top is at `y0`.
pub(super) fn legend(svg: &mut String, y0: f64, items: &[(&str, String)]) {
    let lx = LEFT + PANEL_W + 12.0;
    for (k, (color, label)) in items.iter().enumerate() {
        let ly = y0 + 14.0 + k as f64 * 18.0;
        let _ = writeln!(svg, r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{color}"/>"#, ly - 10.0);
        let _ = writeln!(svg, r#"<text x="{}" y="{ly}">{}</text>"#, lx + 18.0, escape(label));
    }
}

/// Under a panel: the worst service's p99 as a fraction of its SLO (0 to 2 SLOs, the SLO line
/// in the middle) and the online pods waiting for a node (grey, against `most_pending` of any
/// policy, so the panels compare).
fn strip(svg: &mut String, rows: &[TimelineRow], slos_ms: &[f64], most_pending: u32, y0: f64) {
    let t_end = rows.last().map_or(1.0, |r| r.t).max(1.0);
    let x = |t: f64| LEFT + t / t_end * PANEL_W;
    let stride = rows.len().div_ceil(MAX_POINTS).max(1);
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{y0}" width="{PANEL_W}" height="{STRIP_H}" fill="none" stroke="#888"/>"##
    );
    // Pending pods: the most in each drawn step, so a short wait is not thinned away.
    if rows.iter().any(|r| r.pending_online_pods > 0) {
        let y = |n: u32| y0 + STRIP_H - f64::from(n) / f64::from(most_pending) * STRIP_H;
        let mut d = format!("M{:.1},{:.1} ", x(0.0), y0 + STRIP_H);
        for chunk in rows.chunks(stride) {
            let n = chunk.iter().map(|r| r.pending_online_pods).max().unwrap_or(0);
            let _ = write!(d, "L{:.1},{:.1} ", x(chunk[0].t), y(n));
        }
        let _ = write!(d, "L{:.1},{:.1} Z", x(t_end), y0 + STRIP_H);
        let _ = writeln!(svg, r##"<path class="pending" d="{d}" fill="#999" fill-opacity="0.6"/>"##);
    }
    // p99 over SLO of the worst service, the highest in each drawn step.
    let ratio =
        |r: &TimelineRow| r.services.iter().zip(slos_ms).map(|(s, slo)| s.3 / slo.max(1e-9)).fold(0.0, f64::max);
    let y = |q: f64| y0 + STRIP_H - q.clamp(0.0, P99_AXIS_SLOS) / P99_AXIS_SLOS * STRIP_H;
    let mut line = String::new();
    for (k, chunk) in rows.chunks(stride).enumerate() {
        let q = chunk.iter().map(ratio).fold(0.0, f64::max);
        let _ = write!(line, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, x(chunk[0].t), y(q));
    }
    let _ = writeln!(svg, r##"<path class="p99" d="{line}" fill="none" stroke="#8e44ad" stroke-width="1.2"/>"##);
    let sy = y(1.0);
    let _ = writeln!(
        svg,
        r##"<line class="slo" x1="{LEFT}" y1="{sy:.1}" x2="{}" y2="{sy:.1}" stroke="#8e44ad" stroke-width="0.6"/>"##,
        LEFT + PANEL_W
    );
    let _ = writeln!(svg, r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#444">SLO</text>"##, LEFT - 6.0, sy + 4.0);
    let items = [
        ("#8e44ad", "p99 / SLO (worst service)".to_string()),
        ("#999", format!("online pods waiting (max {most_pending})")),
    ];
    legend(svg, y0, &items);
}

pub(super) fn fmt_time(t: f64) -> String {
    if t >= 3600.0 {
        format!("{:.1}h", t / 3600.0)
    } else {
        format!("{:.0}m", t / 60.0)
    }
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: f64, pending: u32, p99_ms: f64) -> TimelineRow {
        TimelineRow {
            t,
            allocation: 0.9,
            gpu_allocation: 0.0,
            system_cpu: 1.0,
            online_cpu: 4.0,
            training_cpu: 4.0,
            pending_online_pods: pending,
            pending_workers: 0,
            killed_by_scheduler: 0,
            victims_leaving: 0,
            killed_young: 0,
            slo_violated: p99_ms > 250.0,
            services: vec![(100.0, 4, 4, p99_ms)],
            workers: vec![4],
        }
    }

    #[test]
    fn the_strip_shows_p99_against_the_slo_and_waiting_pods_on_one_scale() {
        let calm: Vec<TimelineRow> = (0..10).map(|t| row(f64::from(t), 0, 20.0)).collect();
        let spike: Vec<TimelineRow> = (0..10)
            .map(|t| row(f64::from(t), if t == 5 { 8 } else { 0 }, if t == 5 { 1000.0 } else { 20.0 }))
            .collect();
        let svg = render_svg("t", &[("colocate", &calm), ("preemption", &spike)], 0.9, &[250.0]);
        assert_eq!(svg.matches(r#"class="slo""#).count(), 2);
        // Only the policy with waiting pods draws an area; the legend names the shared maximum.
        assert_eq!(svg.matches(r#"class="pending""#).count(), 1);
        assert!(svg.contains("online pods waiting (max 8)"), "{svg}");
        // 1000 ms against a 250 ms SLO is off the 2-SLO axis: drawn at the strip's top.
        let top = TOP + 10.0 + PANEL_H + (PANEL_H + STRIP_TOP + STRIP_H + GAP) + STRIP_TOP;
        let p99 = svg.lines().filter(|l| l.contains(r#"class="p99""#)).nth(1).unwrap();
        assert!(p99.contains(&format!(",{top:.1} ")), "{p99}");
    }
}
