//! The effective settings `colocate check-config` prints, read back: one `block.key` per
//! setting line (`controller:` / `run:` blocks of `  key: value` lines; the `services:` list's
//! `  - ...` lines are not settings).

use std::collections::BTreeMap;

/// `block.key` -> the value as printed.
pub fn printed_settings(printed: &str) -> BTreeMap<String, String> {
    let mut block = "";
    let mut out = BTreeMap::new();
    for line in printed.lines() {
        if let Some((key, value)) = line.strip_prefix("  ").and_then(|l| l.split_once(": ")) {
            if !key.starts_with('-') {
                out.insert(format!("{block}.{key}"), value.to_string());
            }
        } else {
            block = line.split(':').next().unwrap_or("");
        }
    }
    out
}

/// Whether two written values are the same: as durations, as numbers, or as text.
pub fn same_value(a: &str, b: &str) -> bool {
    if let (Ok(x), Ok(y)) = (humantime::parse_duration(a), humantime::parse_duration(b)) {
        return x == y;
    }
    if let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>()) {
        return x == y;
    }
    a == b
}
