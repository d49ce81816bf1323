//! chart.svg, in the style of ElasticDL's figure: per policy, its headline figures, then online
//! and training allocation stacked over time with the total and the target line, and under it
//! what that cost the services: the worst service's p99 against its SLO and the online pods
//! waiting for a node (one scale for every policy). Beside the whole run, the worst spike zoomed
//! (see `spike`), so a 30 s flash crowd in a day-long run is read, not guessed. On a cluster with
//! GPUs the panels show GPUs, the resource training is given there. Plain SVG.

use std::fmt::Write as _;

use super::axis::{duration_words, thousands, time_label, time_ticks};
use super::chart_series::{
    draw_allocation, draw_strip, Frame, ONLINE, P99, PANEL_H, PENDING, STRIP_H, TARGET, TOTAL, TRAINING,
};
use super::report::{PolicyResult, TimelineRow};
use super::spike::{worst_spike, Spike};
use super::svg::{legend_rows, open, text, vertical_caption, Swatch};
use super::worth::{Capacity, Unit};

const WIDTH: f64 = 1240.0;
const LEFT: f64 = 78.0;
/// Right edge of the plots; the room right of it holds the pending-pods axis.
const RIGHT: f64 = 1174.0;
const ZOOM_W: f64 = 306.0;
/// Between the whole run and the zoom: the whole run's right axis and the zoom's left one.
const ZOOM_GAP: f64 = 110.0;
const HEADER_H: f64 = 24.0;
const STRIP_GAP: f64 = 14.0;
/// Under the strip: time labels, then the gap to the next policy.
const BLOCK_H: f64 = HEADER_H + PANEL_H + STRIP_GAP + STRIP_H + 22.0 + 18.0;

/// One policy's panel: its result, its timeline, and the table's worth figures for it.
pub struct ChartPanel<'a> {
    pub result: &'a PolicyResult,
    pub rows: &'a [TimelineRow],
    /// Hours of the chart's unit held by workers, and their share of online-only's idle room.
    pub training_h: Option<f64>,
    pub share: Option<f64>,
}

pub struct ChartInput<'a> {
    pub scenario: &'a str,
    pub panels: Vec<ChartPanel<'a>>,
    /// `controller.target_utilization` (of CPU: drawn on CPU panels only).
    pub target: f64,
    /// Service `s`'s p99 objective, in the order of [`TimelineRow::services`].
    pub slos_ms: &'a [f64],
    pub capacity: Capacity,
    pub duration_s: f64,
    pub step_s: f64,
}

pub fn render_svg(c: &ChartInput) -> String {
    let unit = c.capacity.unit();
    let policies: Vec<(&str, &[TimelineRow])> = c.panels.iter().map(|p| (p.result.policy.as_str(), p.rows)).collect();
    let spike = if c.slos_ms.is_empty() { None } else { worst_spike(&policies, c.duration_s, c.step_s) };
    let most_pending = c.panels.iter().flat_map(|p| p.rows.iter().map(|r| r.pending_online_pods)).max().unwrap_or(0);
    let mut svg = String::new();
    let what = match unit {
        Unit::Cpu => format!("CPU ({} cores allocatable)", thousands(c.capacity.cpu_cores)),
        Unit::Gpu => format!("GPUs ({} allocatable)", c.capacity.gpus),
    };
    text(
        &mut svg,
        LEFT,
        24.0,
        "start",
        r#"font-size="16" font-weight="bold""#,
        &format!("{}: what training got, and what it cost the services", c.scenario),
    );
    text(
        &mut svg,
        LEFT,
        44.0,
        "start",
        r##"fill="#333""##,
        &if c.slos_ms.is_empty() {
            format!("Per policy: {what} requested over time. No online service: nothing for training to cost.")
        } else {
            format!(
                "Per policy: {what} requested over time; under it the worst service's p99 against its SLO, and online \
                 pods waiting for a node."
            )
        },
    );
    let mut y = 62.0;
    if let Some(s) = &spike {
        text(
            &mut svg,
            LEFT,
            y,
            "start",
            r##"fill="#333""##,
            &format!(
                "Right: the worst spike, {} from {} (shaded on the left): {}.",
                duration_words(s.to - s.from),
                time_label(s.from),
                s.what
            ),
        );
        y += 18.0;
    }
    let mut items = vec![
        (Swatch::Fill(ONLINE), "online + system pods".to_string()),
        (Swatch::Fill(TRAINING), "training workers".to_string()),
        (Swatch::Line(TOTAL), "total allocation".to_string()),
    ];
    if unit == Unit::Cpu {
        items.push((Swatch::Dashed(TARGET), format!("target utilization ({:.2})", c.target)));
    }
    if !c.slos_ms.is_empty() {
        items.push((Swatch::Line(P99), "p99 ÷ SLO, worst service (left axis)".to_string()));
    }
    if most_pending > 0 {
        items.push((Swatch::Fill(PENDING), "online pods waiting for a node (right axis)".to_string()));
    }
    if spike.is_some() {
        items.push((Swatch::Fill("#ddd"), "zoomed window".to_string()));
    }
    let top = legend_rows(&mut svg, LEFT, WIDTH - 10.0, y + 6.0, &items);
    let height = top + c.panels.len() as f64 * BLOCK_H + 16.0;
    for (i, p) in c.panels.iter().enumerate() {
        let y0 = top + i as f64 * BLOCK_H;
        block(&mut svg, c, p, spike.as_ref(), most_pending, y0);
    }
    text(
        &mut svg,
        (LEFT + RIGHT) / 2.0,
        height - 8.0,
        "middle",
        r##"fill="#444""##,
        "time since the start of the scenario (h = hours, m = minutes, s = seconds)",
    );
    let mut out = open(WIDTH, height);
    out.push_str(&svg);
    out.push_str("</svg>\n");
    out
}

/// One policy: the headline line, the whole run, and the zoom beside it.
fn block(svg: &mut String, c: &ChartInput, p: &ChartPanel, spike: Option<&Spike>, most_pending: u32, y0: f64) {
    let unit = c.capacity.unit();
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}"><tspan font-weight="bold" font-size="14">{}</tspan><tspan dx="14">{}</tspan></text>"#,
        y0 + 14.0,
        super::svg::escape(&p.result.policy),
        super::svg::escape(&headline(p, unit))
    );
    let panel_top = y0 + HEADER_H;
    let strip_top = panel_top + PANEL_H + STRIP_GAP;
    vertical_caption(svg, 16.0, panel_top + PANEL_H / 2.0, &format!("% of allocatable {}", unit.as_str()));
    vertical_caption(svg, 16.0, strip_top + STRIP_H / 2.0, "p99 ÷ SLO");
    let t_end = c.duration_s.max(1.0);
    let whole_w = if spike.is_some() { RIGHT - ZOOM_W - ZOOM_GAP - LEFT } else { RIGHT - LEFT };
    let target = (unit == Unit::Cpu).then_some(c.target);
    let frames = [(Frame { x: LEFT, w: whole_w, t0: 0.0, t1: t_end }, false)]
        .into_iter()
        .chain(spike.map(|s| (Frame { x: RIGHT - ZOOM_W, w: ZOOM_W, t0: s.from, t1: s.to }, true)));
    for (frame, zoomed) in frames {
        let rows: &[TimelineRow] = if zoomed {
            let a = p.rows.partition_point(|r| r.t < frame.t0);
            let b = p.rows.partition_point(|r| r.t <= frame.t1);
            &p.rows[a.saturating_sub(1)..b]
        } else {
            p.rows
        };
        draw_allocation(svg, &frame, rows, &c.capacity, target, panel_top, zoomed);
        draw_strip(svg, &frame, rows, c.slos_ms, most_pending, strip_top, zoomed);
        if c.slos_ms.is_empty() {
            let y = strip_top + STRIP_H * 0.75 + 4.0;
            text(svg, frame.x + frame.w / 2.0, y, "middle", r##"fill="#666""##, "no online service in this scenario");
        }
        let ticks = if zoomed {
            5
        } else if spike.is_some() {
            8
        } else {
            12
        };
        for t in time_ticks(frame.t0, frame.t1, ticks) {
            let x = frame.x(t);
            for (top, h) in [(panel_top, PANEL_H), (strip_top, STRIP_H)] {
                let _ = writeln!(
                    svg,
                    r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000" stroke-opacity="0.08"/>"##,
                    top + h
                );
            }
            text(svg, x, strip_top + STRIP_H + 15.0, "middle", r##"fill="#444""##, &time_label(t));
        }
        if !zoomed {
            if let Some(s) = spike {
                // Where the zoom is, on the whole run: at least 3 px wide.
                let (a, b) = (frame.x(s.from), frame.x(s.to).max(frame.x(s.from) + 3.0));
                let _ = writeln!(
                    svg,
                    r##"<rect x="{a:.1}" y="{panel_top:.1}" width="{:.1}" height="{:.1}" fill="#000" fill-opacity="0.07" stroke="#333" stroke-width="0.8" stroke-dasharray="3,2"/>"##,
                    b - a,
                    strip_top + STRIP_H - panel_top
                );
            }
        }
    }
}

/// The figures beside a policy's name: allocation, what the services lost, what training got.
fn headline(p: &ChartPanel, unit: Unit) -> String {
    let r = p.result;
    let alloc = match unit {
        Unit::Cpu => r.avg_cpu_allocation,
        Unit::Gpu => r.avg_gpu_allocation.unwrap_or(0.0),
    };
    let u = unit.as_str();
    let mut s = format!(
        "avg {u} alloc {:.1}%   ·   SLO violated {} s   ·   online pods waited {} pod-s   ·   workers killed {}",
        alloc * 100.0,
        thousands(r.slo_violation_s),
        thousands(r.pending_online_pod_s),
        thousands(r.forced_preemptions as f64)
    );
    if let Some(h) = p.training_h {
        let _ = write!(s, "   ·   training {} {u}-h", if h < 100.0 { format!("{h:.1}") } else { thousands(h) });
        if let Some(share) = p.share {
            let _ = write!(s, " ({:.0}% of idle room)", share * 100.0);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::chart_series::tests::row;

    fn chart<'a>(panels: Vec<ChartPanel<'a>>, duration_s: f64) -> ChartInput<'a> {
        ChartInput {
            scenario: "s",
            panels,
            target: 0.9,
            slos_ms: &[250.0],
            capacity: Capacity { cpu_cores: 10.0, gpus: 0 },
            duration_s,
            step_s: 1.0,
        }
    }

    #[test]
    fn a_short_run_is_drawn_whole_with_its_figures_and_legend_inside() {
        let calm: Vec<TimelineRow> = (0..10).map(|t| row(f64::from(t), 0, 20.0)).collect();
        let spike: Vec<TimelineRow> = (0..10)
            .map(|t| row(f64::from(t), if t == 5 { 8 } else { 0 }, if t == 5 { 1000.0 } else { 20.0 }))
            .collect();
        let (colocate, preemption) = (
            PolicyResult { policy: "colocate".into(), avg_cpu_allocation: 0.9441, ..PolicyResult::default() },
            PolicyResult {
                policy: "preemption".into(),
                pending_online_pod_s: 8550.0,
                forced_preemptions: 256,
                ..PolicyResult::default()
            },
        );
        let panels = vec![
            ChartPanel { result: &colocate, rows: &calm, training_h: Some(1234.4), share: Some(0.612) },
            ChartPanel { result: &preemption, rows: &spike, training_h: None, share: None },
        ];
        let svg = render_svg(&chart(panels, 10.0));
        assert_eq!(svg.matches(r#"class="slo""#).count(), 2);
        assert_eq!(svg.matches(r#"class="target""#).count(), 2);
        assert!(!svg.contains("zoom"), "10 s are read whole");
        // Only the policy with waiting pods draws an area; the right axis names the shared maximum.
        assert_eq!(svg.matches(r#"class="pending""#).count(), 1);
        assert!(svg.contains(">8 pods<"), "{svg}");
        assert!(svg.contains("avg CPU alloc 94.4%") && svg.contains("training 1,234 CPU-h (61% of idle room)"));
        assert!(svg.contains("online pods waited 8,550 pod-s   ·   workers killed 256"));
        // Nothing is drawn right of the image's edge.
        for x in svg.split(" x=\"").skip(1).map(|s| s.split('"').next().unwrap().parse::<f64>().unwrap()) {
            assert!(x < WIDTH - 40.0, "{x}");
        }
    }

    #[test]
    fn a_long_run_gets_its_spike_zoomed_beside_it() {
        // Two hours at 1 s; 6 pods wait for 30 s at 1h.
        let rows: Vec<TimelineRow> =
            (0..7200).map(|t| row(f64::from(t), if (3600..3630).contains(&t) { 6 } else { 0 }, 20.0)).collect();
        let r = PolicyResult { policy: "preemption".into(), ..PolicyResult::default() };
        let svg =
            render_svg(&chart(vec![ChartPanel { result: &r, rows: &rows, training_h: None, share: None }], 7200.0));
        assert!(svg.contains(
            "the worst spike, 5 min from 58m (shaded on the left): online pods waiting for a node +6 (preemption)"
        ));
        assert_eq!(svg.matches(r#"class="target""#).count(), 1, "the zoom's lines have their own class");
        assert_eq!(svg.matches(r#"class="pending zoom""#).count(), 1);
        // The zoom's time axis is labelled in minutes within the window.
        assert!(svg.contains(">1h<") && svg.contains(">1h02m<"), "{svg}");
    }

    #[test]
    fn a_gpu_cluster_without_services_shows_gpus_and_says_there_is_no_service() {
        let rows: Vec<TimelineRow> = (0..10)
            .map(|t| TimelineRow {
                services: vec![],
                gpu_allocation: 0.5,
                training_gpu: 4,
                ..row(f64::from(t), 0, 0.0)
            })
            .collect();
        let r = PolicyResult { policy: "gang".into(), avg_gpu_allocation: Some(0.5), ..PolicyResult::default() };
        let mut c = chart(vec![ChartPanel { result: &r, rows: &rows, training_h: Some(1.5), share: None }], 10.0);
        c.slos_ms = &[];
        c.capacity = Capacity { cpu_cores: 10.0, gpus: 8 };
        let svg = render_svg(&c);
        assert!(svg.contains("no online service in this scenario") && !svg.contains("p99 ÷ SLO, worst"), "{svg}");
        assert!(svg.contains("% of allocatable GPU") && svg.contains("avg GPU alloc 50.0%"), "{svg}");
        assert!(svg.contains("training 1.5 GPU-h") && !svg.contains("idle room"), "{svg}");
        // The target is a CPU figure: no target line on GPU panels.
        assert_eq!(svg.matches(r#"class="target""#).count(), 0);
    }
}
