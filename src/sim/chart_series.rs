//! The series of chart.svg inside one frame (the whole run, or the zoom): the stacked allocation
//! panel and the strip under it, with their vertical axes.

use std::fmt::Write as _;

use super::report::TimelineRow;
use super::svg::text;
use super::worth::Capacity;

pub const PANEL_H: f64 = 160.0;
pub const STRIP_H: f64 = 64.0;
pub const ONLINE: &str = "#4e79a7";
pub const TRAINING: &str = "#f28e2b";
pub const TOTAL: &str = "#222";
pub const TARGET: &str = "#d62728";
pub const P99: &str = "#8e44ad";
pub const PENDING: &str = "#999";

/// The p99 axis runs from 0 to this many SLOs (higher values are drawn at the top).
const P99_AXIS_SLOS: f64 = 2.0;
/// Points drawn per series: plenty for a screen, small files for day-long replays.
const MAX_POINTS: usize = 1200;

/// Where a stretch of time [t0, t1] is drawn: from x, w wide.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    pub x: f64,
    pub w: f64,
    pub t0: f64,
    pub t1: f64,
}

impl Frame {
    pub fn x(&self, t: f64) -> f64 {
        self.x + (t.clamp(self.t0, self.t1) - self.t0) / (self.t1 - self.t0).max(1e-9) * self.w
    }
}

/// `zoomed` frames give their lines a class of their own: `class="target"` counts the panels.
fn class(name: &str, zoomed: bool) -> String {
    if zoomed {
        format!("{name} zoom")
    } else {
        name.to_string()
    }
}

/// Online (with system) and training allocation stacked, as a share of `cap`'s unit, the total
/// line and, on CPU panels, the `target` line; the percentage axis on the left.
pub fn draw_allocation(
    svg: &mut String,
    f: &Frame,
    rows: &[TimelineRow],
    cap: &Capacity,
    target: Option<f64>,
    y0: f64,
    zoomed: bool,
) {
    let unit = cap.unit();
    let total = cap.total(unit).max(1e-9);
    let y = |frac: f64| y0 + PANEL_H - frac.clamp(0.0, 1.05) / 1.05 * PANEL_H;
    let _ = writeln!(
        svg,
        r##"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{PANEL_H}" fill="none" stroke="#888"/>"##,
        f.x, f.w
    );
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        text(svg, f.x - 6.0, y(frac) + 4.0, "end", r##"fill="#444""##, &format!("{:.0}%", frac * 100.0));
        if frac > 0.0 {
            let _ = writeln!(
                svg,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000" stroke-opacity="0.08"/>"##,
                f.x,
                y(frac),
                f.x + f.w,
                y(frac)
            );
        }
    }
    let stride = rows.len().div_ceil(MAX_POINTS).max(1);
    let sampled: Vec<&TimelineRow> = rows.iter().step_by(stride).collect();
    let online = |r: &TimelineRow| cap.split(r, unit).0 / total;
    let all = |r: &TimelineRow| {
        let (o, t) = cap.split(r, unit);
        (o + t) / total
    };
    let area = |lower: &dyn Fn(&TimelineRow) -> f64, upper: &dyn Fn(&TimelineRow) -> f64| {
        let mut d = String::new();
        for (k, r) in sampled.iter().enumerate() {
            let _ = write!(d, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, f.x(r.t), y(upper(r)));
        }
        for r in sampled.iter().rev() {
            let _ = write!(d, "L{:.1},{:.1} ", f.x(r.t), y(lower(r)));
        }
        d.push('Z');
        d
    };
    if sampled.is_empty() {
        return;
    }
    let _ = writeln!(svg, r#"<path d="{}" fill="{ONLINE}" fill-opacity="0.8"/>"#, area(&|_| 0.0, &online));
    let _ = writeln!(svg, r#"<path d="{}" fill="{TRAINING}" fill-opacity="0.8"/>"#, area(&online, &all));
    let mut line = String::new();
    for (k, r) in sampled.iter().enumerate() {
        let _ = write!(line, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, f.x(r.t), y(all(r)));
    }
    let _ = writeln!(svg, r#"<path d="{line}" fill="none" stroke="{TOTAL}" stroke-width="1.2"/>"#);
    if let Some(target) = target {
        let ty = y(target);
        let _ = writeln!(
            svg,
            r#"<line class="{}" x1="{:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="{TARGET}" stroke-dasharray="6,4"/>"#,
            class("target", zoomed),
            f.x,
            f.x + f.w
        );
    }
}

/// Under a panel: the worst service's p99 as a fraction of its SLO (0 to 2 SLOs, the SLO line in
/// the middle, left axis) and the online pods waiting for a node (grey, right axis, against
/// `most_pending` of any policy, so the panels compare).
pub fn draw_strip(
    svg: &mut String,
    f: &Frame,
    rows: &[TimelineRow],
    slos_ms: &[f64],
    most_pending: u32,
    y0: f64,
    zoomed: bool,
) {
    let stride = rows.len().div_ceil(MAX_POINTS).max(1);
    let _ = writeln!(
        svg,
        r##"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{STRIP_H}" fill="none" stroke="#888"/>"##,
        f.x, f.w
    );
    let y = |q: f64| y0 + STRIP_H - q.clamp(0.0, P99_AXIS_SLOS) / P99_AXIS_SLOS * STRIP_H;
    for (q, label, dy) in [(0.0, "0", 0.0), (1.0, "SLO", 4.0), (2.0, "2× SLO", 9.0)] {
        text(svg, f.x - 6.0, y(q) + dy, "end", r##"fill="#444""##, label);
    }
    // Pending pods: the most in each drawn step, so a short wait is not thinned away.
    if most_pending > 0 {
        let yp = |n: u32| y0 + STRIP_H - f64::from(n) / f64::from(most_pending) * STRIP_H;
        text(svg, f.x + f.w + 4.0, y0 + STRIP_H, "start", &format!(r#"fill="{PENDING}""#), "0");
        text(
            svg,
            f.x + f.w + 4.0,
            y0 + 10.0,
            "start",
            &format!(r#"fill="{PENDING}""#),
            &format!("{most_pending} pods"),
        );
        if rows.iter().any(|r| r.pending_online_pods > 0) {
            let mut d = format!("M{:.1},{:.1} ", f.x(rows[0].t), y0 + STRIP_H);
            for chunk in rows.chunks(stride) {
                let n = chunk.iter().map(|r| r.pending_online_pods).max().unwrap_or(0);
                let _ = write!(d, "L{:.1},{:.1} ", f.x(chunk[0].t), yp(n));
            }
            let last = rows.last().map_or(f.t1, |r| r.t);
            let _ = write!(d, "L{:.1},{:.1} Z", f.x(last), y0 + STRIP_H);
            let _ = writeln!(
                svg,
                r#"<path class="{}" d="{d}" fill="{PENDING}" fill-opacity="0.6"/>"#,
                class("pending", zoomed)
            );
        }
    }
    // p99 over SLO of the worst service, the highest in each drawn step.
    let ratio =
        |r: &TimelineRow| r.services.iter().zip(slos_ms).map(|(s, slo)| s.3 / slo.max(1e-9)).fold(0.0, f64::max);
    let mut line = String::new();
    for (k, chunk) in rows.chunks(stride).enumerate() {
        let q = chunk.iter().map(ratio).fold(0.0, f64::max);
        let _ = write!(line, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, f.x(chunk[0].t), y(q));
    }
    let _ = writeln!(
        svg,
        r#"<path class="{}" d="{line}" fill="none" stroke="{P99}" stroke-width="1.2"/>"#,
        class("p99", zoomed)
    );
    let sy = y(1.0);
    let _ = writeln!(
        svg,
        r#"<line class="{}" x1="{:.1}" y1="{sy:.1}" x2="{:.1}" y2="{sy:.1}" stroke="{P99}" stroke-width="0.6" stroke-dasharray="3,3"/>"#,
        class("slo", zoomed),
        f.x,
        f.x + f.w
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(t: f64, pending: u32, p99_ms: f64) -> TimelineRow {
        TimelineRow {
            t,
            allocation: 0.9,
            system_cpu: 1.0,
            online_cpu: 4.0,
            training_cpu: 4.0,
            pending_online_pods: pending,
            slo_violated: p99_ms > 250.0,
            services: vec![(100.0, 4, 4, p99_ms)],
            workers: vec![4],
            ..TimelineRow::default()
        }
    }

    #[test]
    fn p99_above_the_axis_is_drawn_at_the_strip_s_top_and_zoomed_lines_have_their_own_class() {
        let rows: Vec<TimelineRow> =
            (0..10).map(|t| row(f64::from(t), 0, if t == 5 { 1000.0 } else { 20.0 })).collect();
        let frame = Frame { x: 100.0, w: 90.0, t0: 0.0, t1: 9.0 };
        let mut svg = String::new();
        draw_strip(&mut svg, &frame, &rows, &[250.0], 0, 500.0, true);
        let p99 = svg.lines().find(|l| l.contains(r#"class="p99 zoom""#)).unwrap();
        // 1000 ms against a 250 ms SLO is off the 2-SLO axis: drawn at the strip's top; 20 ms low.
        assert!(p99.contains("L150.0,500.0 "), "{p99}");
        assert!(p99.contains(&format!("L160.0,{:.1} ", 500.0 + STRIP_H - 20.0 / 250.0 / 2.0 * STRIP_H)), "{p99}");
        assert!(svg.contains(r#"class="slo zoom""#) && !svg.contains(r#"class="slo""#));
        assert!(!svg.contains("pods<"), "no pending axis when no pod waited");
        assert_eq!(frame.x(-5.0), 100.0, "times outside the frame are held at its edges");
    }
}
