//! The worst spike of a replay, which chart.svg zooms into beside the whole run: a 30 s flash
//! crowd is a hairline in a day-long panel, and the moments where the policies differ are the
//! moments the services need room fast.
//!
//! Where online pods waited for a node under some policy, the spike is the largest rise of
//! waiting pods (that is where a policy cost the services something); otherwise it is the largest
//! rise of online demand, the replicas the HPA asked for. A rise is measured over a quarter of the
//! zoom, so a slow daily ramp does not outweigh a sudden jump.

use std::collections::VecDeque;

use super::report::TimelineRow;

/// The window chart.svg zooms into, and what put it there.
#[derive(Debug, Clone, PartialEq)]
pub struct Spike {
    pub from: f64,
    pub to: f64,
    /// What rose, for the chart's caption: "online pods waiting for a node +12 (preemption)".
    pub what: String,
}

/// The zoom's length: a sixth of the run, at most 5 minutes, and at least 60 steps.
pub fn zoom_length(duration_s: f64, step_s: f64) -> f64 {
    (duration_s / 6.0).min(300.0).max(60.0 * step_s)
}

/// The step where `values` rose most within `horizon` seconds before it (its value minus the
/// least value in [t - horizon, t]), and that rise; the earliest on a tie; `None` when nothing
/// rises.
pub fn largest_rise(times: &[f64], values: &[f64], horizon: f64) -> Option<(usize, f64)> {
    // Indices of a window minimum: values increase from front to back.
    let mut window: VecDeque<usize> = VecDeque::new();
    let mut best: Option<(usize, f64)> = None;
    for (i, (&t, &v)) in times.iter().zip(values).enumerate() {
        while window.back().is_some_and(|&b| values[b] >= v) {
            window.pop_back();
        }
        window.push_back(i);
        while window.front().is_some_and(|&f| times[f] < t - horizon - 1e-9) {
            window.pop_front();
        }
        let rise = v - values[window[0]];
        if rise > best.map_or(0.0, |(_, r)| r) {
            best = Some((i, rise));
        }
    }
    best
}

/// Runs shorter than this are read whole: 30 s of 20 minutes take 17 px of the chart.
pub const MIN_ZOOMED_RUN_S: f64 = 1200.0;

/// The window to zoom into, or `None` when the run is short enough to read whole (under
/// [`MIN_ZOOMED_RUN_S`], or under three zoom lengths) or nothing rises.
pub fn worst_spike(panels: &[(&str, &[TimelineRow])], duration_s: f64, step_s: f64) -> Option<Spike> {
    let zoom = zoom_length(duration_s, step_s);
    if duration_s < MIN_ZOOMED_RUN_S || duration_s < 3.0 * zoom {
        return None;
    }
    let n = panels.iter().map(|(_, rows)| rows.len()).min()?;
    let times: Vec<f64> = panels[0].1[..n].iter().map(|r| r.t).collect();
    // Per step, the most of any policy, and which policy that was.
    let most = |f: &dyn Fn(&TimelineRow) -> f64| -> Vec<(f64, usize)> {
        (0..n)
            .map(|i| {
                panels.iter().enumerate().map(|(p, (_, rows))| (f(&rows[i]), p)).fold((0.0, 0), |a, b| {
                    if b.0 > a.0 {
                        b
                    } else {
                        a
                    }
                })
            })
            .collect()
    };
    let pending = most(&|r| f64::from(r.pending_online_pods));
    let demand = most(&|r| r.services.iter().map(|s| f64::from(s.1)).sum());
    let (series, what) = if pending.iter().any(|(v, _)| *v > 0.0) {
        (pending, "online pods waiting for a node")
    } else {
        (demand, "online demand (replicas the HPA asked for)")
    };
    let values: Vec<f64> = series.iter().map(|(v, _)| *v).collect();
    let (at, rise) = largest_rise(&times, &values, zoom / 4.0)?;
    let from = (times[at] - 0.4 * zoom).clamp(0.0, (duration_s - zoom).max(0.0));
    let policy = panels[series[at].1].0;
    Some(Spike { from, to: from + zoom, what: format!("{what} +{rise:.0} ({policy})") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: f64, pending: u32, replicas: u32) -> TimelineRow {
        TimelineRow {
            t,
            allocation: 0.5,
            pending_online_pods: pending,
            services: vec![(0.0, replicas, replicas, 10.0)],
            ..TimelineRow::default()
        }
    }

    /// A day at 5 s: replicas ramp from 10 to 110 over 6 hours, and a 30 s flash crowd of +40
    /// replicas at 15h.
    fn day(pending_at: Option<f64>) -> Vec<TimelineRow> {
        (0..17280)
            .map(|k| {
                let t = f64::from(k) * 5.0;
                let ramp = 10.0 + 100.0 * (t / 21600.0).min(1.0);
                let crowd = if (54000.0..54030.0).contains(&t) { 40.0 } else { 0.0 };
                let pending = u32::from(pending_at.is_some_and(|p| (p..p + 60.0).contains(&t))) * 7;
                row(t, pending, (ramp + crowd) as u32)
            })
            .collect()
    }

    #[test]
    fn a_flash_crowd_outweighs_a_larger_but_slow_daily_ramp() {
        let rows = day(None);
        let spike = worst_spike(&[("colocate", &rows)], 86400.0, 5.0).unwrap();
        assert_eq!(spike.to - spike.from, 300.0, "5 minutes of a day");
        assert!(spike.from < 54000.0 && 54030.0 < spike.to, "{spike:?}");
        assert!(spike.what.starts_with("online demand") && spike.what.contains("+40"), "{spike:?}");
    }

    #[test]
    fn waiting_pods_under_any_policy_take_the_zoom() {
        let calm = day(None);
        let waiting = day(Some(30000.0));
        let spike = worst_spike(&[("colocate", &calm), ("preemption", &waiting)], 86400.0, 5.0).unwrap();
        assert!(spike.from < 30000.0 && 30060.0 < spike.to, "{spike:?}");
        assert_eq!(spike.what, "online pods waiting for a node +7 (preemption)");
    }

    #[test]
    fn the_window_stays_inside_the_run_and_short_runs_are_not_zoomed() {
        let rows: Vec<TimelineRow> = (0..3600).map(|k| row(f64::from(k), 0, if k < 10 { 1 } else { 5 })).collect();
        let spike = worst_spike(&[("colocate", &rows)], 3600.0, 1.0).unwrap();
        assert_eq!((spike.from, spike.to), (0.0, 300.0));
        assert!(worst_spike(&[("colocate", &rows[..600])], 600.0, 1.0).is_none(), "10 minutes read whole");
        let flat: Vec<TimelineRow> = (0..3600).map(|k| row(f64::from(k), 0, 3)).collect();
        assert!(worst_spike(&[("colocate", &flat)], 3600.0, 1.0).is_none(), "nothing rises");
    }

    #[test]
    fn largest_rise_measures_within_the_horizon_and_keeps_the_earliest() {
        let times = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(largest_rise(&times, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 2.0), Some((2, 2.0)));
        assert_eq!(largest_rise(&times, &[5.0, 0.0, 3.0, 0.0, 3.0, 1.0], 1.0), Some((2, 3.0)));
        assert_eq!(largest_rise(&times, &[3.0, 2.0, 1.0, 1.0, 0.0, 0.0], 5.0), None);
    }
}
