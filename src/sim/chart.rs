//! The co-location chart in the style of ElasticDL's figure: per policy, online CPU and
//! training CPU stacked over time with the total utilization and the target line. Plain SVG.

use std::fmt::Write as _;

use super::report::TimelineRow;

const PANEL_W: f64 = 900.0;
const PANEL_H: f64 = 200.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 40.0;
const GAP: f64 = 60.0;
/// Points drawn per series: plenty for a screen, small files for day-long replays.
const MAX_POINTS: usize = 1200;

pub fn render_svg(title: &str, panels: &[(&str, &[TimelineRow])], target: f64) -> String {
    let height = TOP + panels.len() as f64 * (PANEL_H + GAP) + 20.0;
    let width = LEFT + PANEL_W + 160.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}</text>"#, escape(title));
    for (i, (policy, rows)) in panels.iter().enumerate() {
        let y0 = TOP + i as f64 * (PANEL_H + GAP) + 10.0;
        panel(&mut svg, policy, rows, target, y0);
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
        r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{}" y2="{ty:.1}" stroke="#d62728" stroke-dasharray="6,4"/>"##,
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
    let lx = LEFT + PANEL_W + 12.0;
    let legend =
        [("#4e79a7", "online + system"), ("#f28e2b", "training"), ("#222", "total allocation"), ("#d62728", "target")];
    for (k, (color, label)) in legend.iter().enumerate() {
        let ly = y0 + 14.0 + k as f64 * 18.0;
        let _ = writeln!(svg, r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{color}"/>"#, ly - 10.0);
        let _ = writeln!(svg, r#"<text x="{}" y="{ly}">{label}</text>"#, lx + 18.0);
    }
}

fn fmt_time(t: f64) -> String {
    if t >= 3600.0 {
        format!("{:.1}h", t / 3600.0)
    } else {
        format!("{:.0}m", t / 60.0)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
