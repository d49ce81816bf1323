//! Axis ticks for the replay charts: time ticks at round steps (seconds, minutes, hours, days)
//! with labels that carry their unit, so a 5-minute zoom and a 3-day run both read at a glance.

/// Tick steps a time axis may use, in seconds.
const TIME_STEPS: [f64; 21] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0,
    43200.0, 86400.0, 172800.0, 604800.0, 2419200.0,
];

/// Round times in [from, to] at the smallest step that gives at most `max_ticks` ticks.
pub fn time_ticks(from: f64, to: f64, max_ticks: usize) -> Vec<f64> {
    let span = (to - from).max(1e-9);
    let step = TIME_STEPS.iter().copied().find(|s| span / s <= max_ticks.max(1) as f64).unwrap_or(span);
    let first = (from / step - 1e-9).ceil() as i64;
    (first..).map(|k| k as f64 * step).take_while(|t| *t <= to + 1e-9).collect()
}

/// A time since the start with its unit: `6h`, `7h05m`, `8m`, `8m20s`, `45s`, `60h`.
pub fn time_label(t: f64) -> String {
    let s = t.round().max(0.0) as u64;
    let (hours, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    if s == 0 {
        "0".to_string()
    } else if hours > 0 {
        match (m, sec) {
            (0, 0) => format!("{hours}h"),
            (_, 0) => format!("{hours}h{m:02}m"),
            _ => format!("{hours}h{m:02}m{sec:02}s"),
        }
    } else if m > 0 {
        if sec == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{sec:02}s")
        }
    } else {
        format!("{sec}s")
    }
}

/// A measured duration, to the minute from an hour on: `5h03m`, `8m20s`, `45s`.
pub fn duration_label(s: f64) -> String {
    if s >= 3600.0 {
        time_label((s / 60.0).round() * 60.0)
    } else {
        time_label(s)
    }
}

/// A duration in words for captions: `5 min`, `90 s`, `2.5 h`.
pub fn duration_words(s: f64) -> String {
    if s >= 7200.0 {
        format!("{} h", trim(s / 3600.0))
    } else if s >= 120.0 {
        format!("{} min", trim(s / 60.0))
    } else {
        format!("{s:.0} s")
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

/// Ticks of a log time axis (completion times), round times about evenly apart on it (1 s, 10 s,
/// 1 min, 5 min, 30 min, 2 h, 12 h, 2 d, 1 w, 4 w), those within [lo, hi].
pub fn log_time_ticks(lo: f64, hi: f64) -> Vec<f64> {
    [1.0, 10.0, 60.0, 300.0, 1800.0, 7200.0, 43200.0, 172800.0, 604800.0, 2419200.0]
        .into_iter()
        .filter(|t| *t >= lo * (1.0 - 1e-9) && *t <= hi * (1.0 + 1e-9))
        .collect()
}

/// Thousands separated by commas, no decimals: `12,345`.
pub fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_ticks_every_three_hours_and_a_zoom_every_minute() {
        assert_eq!(time_ticks(0.0, 86400.0, 8), (0..=8).map(|k| f64::from(k) * 10800.0).collect::<Vec<_>>());
        // A 5-minute zoom starting at 7h02m10s: whole minutes inside it only.
        let zoom = time_ticks(25330.0, 25630.0, 6);
        assert_eq!(zoom, [25380.0, 25440.0, 25500.0, 25560.0, 25620.0]);
        assert_eq!(
            zoom.iter().map(|t| time_label(*t)).collect::<Vec<_>>(),
            ["7h03m", "7h04m", "7h05m", "7h06m", "7h07m"]
        );
        assert_eq!(time_ticks(0.0, 1800.0, 6), [0.0, 300.0, 600.0, 900.0, 1200.0, 1500.0, 1800.0]);
        assert_eq!(time_ticks(0.0, 259200.0, 8).len(), 7, "3 days: every 12 h");
    }

    #[test]
    fn labels_carry_their_unit() {
        assert_eq!(time_label(0.0), "0");
        assert_eq!(time_label(45.0), "45s");
        assert_eq!(time_label(500.0), "8m20s");
        assert_eq!(time_label(600.0), "10m");
        assert_eq!(time_label(21600.0), "6h");
        assert_eq!(time_label(90000.0), "25h");
        assert_eq!(time_label(172800.0), "48h");
        assert_eq!(duration_label(18200.0), "5h03m");
        assert_eq!(duration_label(465.0), "7m45s");
        assert_eq!(time_label(3630.0), "1h00m30s");
        assert_eq!(duration_words(300.0), "5 min");
        assert_eq!(duration_words(90.0), "90 s");
        assert_eq!(duration_words(9000.0), "2.5 h");
    }

    #[test]
    fn log_ticks_and_thousands() {
        assert_eq!(log_time_ticks(5.0, 20000.0), [10.0, 60.0, 300.0, 1800.0, 7200.0]);
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
    }
}
