//! Load curves of scenario services: constant, interpolated points, or a CSV trace.

use std::path::Path;

use super::spec::{LoadSpec, TraceSpec};

/// Requests per second as a function of simulated seconds.
#[derive(Debug, Clone)]
pub enum LoadCurve {
    Constant(f64),
    /// Linear interpolation between points; the last value holds.
    Linear(Vec<(f64, f64)>),
    /// Each value holds until the next row (traces).
    Steps(Vec<(f64, f64)>),
}

/// (key suffix such as `.points[2]`, problem).
type LoadError = (String, String);

impl LoadCurve {
    pub fn from_spec(spec: &LoadSpec, base: &Path) -> Result<LoadCurve, LoadError> {
        let given = [spec.constant.is_some(), spec.points.is_some(), spec.trace.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err((String::new(), "give exactly one of constant, points, trace".into()));
        }
        if let Some(c) = spec.constant {
            if !(c >= 0.0 && c.is_finite()) {
                return Err((".constant".into(), format!("{c} must be 0 or more")));
            }
            return Ok(LoadCurve::Constant(c));
        }
        if let Some(points) = &spec.points {
            return points_curve(points);
        }
        let trace = spec.trace.as_ref().expect("one of the three is set");
        trace_curve(trace, base).map(LoadCurve::Steps)
    }

    /// The mean over `[from, to]`, exact: between two of its points the curve is constant
    /// (steps) or linear, so each piece's mean is its value at the piece's middle. The value at
    /// `from` for an empty span.
    pub fn mean(&self, from: f64, to: f64) -> f64 {
        let points = match self {
            LoadCurve::Constant(c) => return *c,
            LoadCurve::Linear(p) | LoadCurve::Steps(p) => p,
        };
        if to <= from {
            return self.at(from);
        }
        let inside = &points[points.partition_point(|p| p.0 <= from)..points.partition_point(|p| p.0 < to)];
        let mut area = 0.0;
        let mut start = from;
        for end in inside.iter().map(|p| p.0).chain(std::iter::once(to)) {
            area += self.at((start + end) / 2.0) * (end - start);
            start = end;
        }
        area / (to - from)
    }

    pub fn at(&self, t: f64) -> f64 {
        match self {
            LoadCurve::Constant(c) => *c,
            LoadCurve::Linear(p) => {
                let i = p.partition_point(|(pt, _)| *pt <= t);
                if i == 0 {
                    p[0].1
                } else if i == p.len() {
                    p[i - 1].1
                } else {
                    let (t0, v0) = p[i - 1];
                    let (t1, v1) = p[i];
                    if t1 <= t0 {
                        v1
                    } else {
                        v0 + (v1 - v0) * (t - t0) / (t1 - t0)
                    }
                }
            }
            LoadCurve::Steps(p) => {
                let i = p.partition_point(|(pt, _)| *pt <= t);
                p[i.saturating_sub(1)].1
            }
        }
    }
}

fn points_curve(points: &[(String, f64)]) -> Result<LoadCurve, LoadError> {
    if points.is_empty() {
        return Err((".points".into(), "needs at least one point".into()));
    }
    let mut out = Vec::with_capacity(points.len());
    for (i, (t, v)) in points.iter().enumerate() {
        let d = humantime::parse_duration(t.trim())
            .map_err(|e| (format!(".points[{i}]"), format!("`{t}` is not a duration such as 90s or 10m ({e})")))?;
        if !(*v >= 0.0 && v.is_finite()) {
            return Err((format!(".points[{i}]"), format!("load {v} must be 0 or more")));
        }
        let secs = d.as_secs_f64();
        if let Some((prev, _)) = out.last() {
            if secs < *prev {
                return Err((format!(".points[{i}]"), format!("time {t} goes back before the previous point")));
            }
        }
        out.push((secs, *v));
    }
    Ok(LoadCurve::Linear(out))
}

fn trace_curve(spec: &TraceSpec, base: &Path) -> Result<Vec<(f64, f64)>, LoadError> {
    let key = ".trace.file".to_string();
    let path = base.join(&spec.file);
    let text =
        std::fs::read_to_string(&path).map_err(|e| (key.clone(), format!("cannot read {}: {e}", path.display())))?;
    let at = |line: usize, m: String| (key.clone(), format!("{}:{line}: {m}", path.display()));
    if !(spec.scale >= 0.0 && spec.scale.is_finite()) {
        return Err((".trace.scale".into(), format!("{} must be 0 or more", spec.scale)));
    }
    if !(spec.speedup > 0.0 && spec.speedup.is_finite()) {
        return Err((".trace.speedup".into(), format!("{} must be above 0", spec.speedup)));
    }
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| at(1, "is empty; expected a header row".into()))?;
    let columns: Vec<&str> = header.split(',').map(|c| c.trim().trim_matches('"')).collect();
    let find = |name: &str, what: &str| {
        columns.iter().position(|c| *c == name).ok_or_else(|| {
            (
                format!(".trace.{what}"),
                format!("column `{name}` is not in {} (it has {})", path.display(), columns.join(", ")),
            )
        })
    };
    let time_col = match (&spec.time_column, spec.row_interval) {
        (Some(name), _) => Some(find(name, "time_column")?),
        (None, Some(_)) => None,
        (None, None) => Some(
            columns
                .iter()
                .position(|c| ["t_s", "timestamp", "time"].contains(&c.to_ascii_lowercase().as_str()))
                .ok_or_else(|| {
                    (
                        ".trace.time_column".to_string(),
                        format!(
                            "{} has no t_s, timestamp or time column; name one, or give row_interval",
                            path.display()
                        ),
                    )
                })?,
        ),
    };
    let value_col = match &spec.value_column {
        Some(name) => find(name, "value_column")?,
        None => (0..columns.len())
            .find(|i| Some(*i) != time_col)
            .ok_or_else(|| (".trace.value_column".to_string(), format!("{} has no value column", path.display())))?,
    };
    let mut rows: Vec<(f64, f64)> = Vec::new();
    let mut first_time: Option<f64> = None;
    for (n, (idx, line)) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(|c| c.trim().trim_matches('"')).collect();
        let cell = |c: usize| {
            cells
                .get(c)
                .copied()
                .ok_or_else(|| at(idx + 1, format!("has {} cells; column {} is missing", cells.len(), c + 1)))
        };
        let t = match time_col {
            Some(c) => {
                let raw = cell(c)?;
                let t = parse_time(raw)
                    .ok_or_else(|| at(idx + 1, format!("`{raw}` is neither seconds nor YYYY-MM-DD HH:MM[:SS]")))?;
                t - *first_time.get_or_insert(t)
            }
            None => n as f64 * spec.row_interval.unwrap_or_default().as_secs_f64(),
        };
        let raw = cell(value_col)?;
        let v: f64 = raw.parse().map_err(|_| at(idx + 1, format!("value `{raw}` is not a number")))?;
        if !(v >= 0.0 && v.is_finite()) {
            return Err(at(idx + 1, format!("value {v} must be 0 or more")));
        }
        if rows.last().is_some_and(|(pt, _)| t < *pt) {
            return Err(at(idx + 1, "time goes back before the previous row".into()));
        }
        rows.push((t, v * spec.scale));
    }
    let skip = spec.skip.as_secs_f64();
    let kept: Vec<(f64, f64)> = match rows.iter().rposition(|(t, _)| *t <= skip) {
        Some(i) => rows[i..].iter().map(|(t, v)| (((t - skip).max(0.0)) / spec.speedup, *v)).collect(),
        None => rows.iter().map(|(t, v)| ((t - skip) / spec.speedup, *v)).collect(),
    };
    if kept.is_empty() {
        return Err(at(1, "has no data rows".into()));
    }
    Ok(kept)
}

/// Seconds as a number, or a timestamp `YYYY-MM-DD HH:MM[:SS]` as seconds since 1970.
pub(super) fn parse_time(s: &str) -> Option<f64> {
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let h: i64 = t.next()?.parse().ok()?;
    let min: i64 = t.next()?.parse().ok()?;
    let sec: f64 = t.next().map_or(Some(0.0), |x| x.parse().ok())?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 {
        return None;
    }
    Some((days_from_civil(y, m, day) * 86_400 + h * 3_600 + min * 60) as f64 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Mean of the load over `[from, to]` (clamped at 0): what a rate over that window reports.
/// Exact, as a Prometheus rate of a counter is: averaged at 16 points a second apart, a step of
/// WorldCup98's trace reads up to 7% high in the seconds after it, and replay would release
/// workers a sample before live does.
pub fn mean_load(curve: &LoadCurve, from: f64, to: f64) -> f64 {
    // An empty or reversed span reads the value at `from`: `LoadCurve::mean` sees to that.
    curve.mean(from.max(0.0), to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_points_interpolate_and_hold() {
        let c = LoadCurve::Linear(vec![(0.0, 100.0), (10.0, 200.0)]);
        assert_eq!(c.at(5.0), 150.0);
        assert_eq!(c.at(20.0), 200.0);
    }

    #[test]
    fn mean_is_exact_across_steps_and_ramps() {
        let steps = LoadCurve::Steps(vec![(0.0, 100.0), (10.0, 200.0)]);
        assert_eq!(steps.mean(5.0, 15.0), 150.0);
        // A second either side of the step: 16 points a second apart over [9.4, 24.4] put
        // 15 of them after it and read 193.75; the exact mean is 196.
        assert!((steps.mean(9.4, 24.4) - (0.6 * 100.0 + 14.4 * 200.0) / 15.0).abs() < 1e-9);
        assert_eq!(steps.mean(-5.0, 5.0), 100.0);
        assert_eq!(steps.mean(3.0, 3.0), 100.0);
        let ramp = LoadCurve::Linear(vec![(0.0, 0.0), (10.0, 100.0)]);
        assert!((ramp.mean(0.0, 10.0) - 50.0).abs() < 1e-9);
        // Past the last point the value holds.
        assert!((ramp.mean(5.0, 15.0) - 87.5).abs() < 1e-9);
        // A jump written as two points at one moment.
        let jump = LoadCurve::Linear(vec![(0.0, 100.0), (10.0, 100.0), (10.0, 300.0)]);
        assert!((jump.mean(5.0, 15.0) - 200.0).abs() < 1e-9);
        assert_eq!(LoadCurve::Constant(7.0).mean(0.0, 100.0), 7.0);
    }

    #[test]
    fn steps_hold_until_next_row() {
        let c = LoadCurve::Steps(vec![(0.0, 1.0), (60.0, 2.0)]);
        assert_eq!(c.at(59.9), 1.0);
        assert_eq!(c.at(60.0), 2.0);
    }

    #[test]
    fn timestamps_are_relative_seconds() {
        let a = parse_time("2014-02-14 14:30:00").unwrap();
        let b = parse_time("2014-02-14 14:35").unwrap();
        assert_eq!(b - a, 300.0);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(parse_time("14:30"), None);
    }
}
