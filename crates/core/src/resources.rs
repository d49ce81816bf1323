//! Resource amounts (CPU, memory, GPU) and Kubernetes quantity parsing.
//!
//! CPU is kept in millicores and memory in bytes as integers so that packing decisions are exact
//! and repeatable: two runs of the same snapshot never disagree because of float rounding.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use thiserror::Error;

/// Requests or capacity of one object: what the scheduler compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu: i64,
}

impl Resources {
    pub const ZERO: Resources = Resources { cpu_milli: 0, memory_bytes: 0, gpu: 0 };

    pub fn new(cpu_milli: i64, memory_bytes: i64, gpu: i64) -> Self {
        Resources { cpu_milli, memory_bytes, gpu }
    }

    /// `self` fits into `room` in every dimension.
    pub fn fits_in(&self, room: &Resources) -> bool {
        self.cpu_milli <= room.cpu_milli && self.memory_bytes <= room.memory_bytes && self.gpu <= room.gpu
    }

    pub fn is_zero(&self) -> bool {
        *self == Resources::ZERO
    }

    /// Component-wise maximum with zero: capacity never goes negative when shown.
    pub fn clamp_non_negative(self) -> Resources {
        Resources { cpu_milli: self.cpu_milli.max(0), memory_bytes: self.memory_bytes.max(0), gpu: self.gpu.max(0) }
    }

    pub fn max(self, other: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            gpu: self.gpu.max(other.gpu),
        }
    }

    pub fn min(self, other: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.min(other.cpu_milli),
            memory_bytes: self.memory_bytes.min(other.memory_bytes),
            gpu: self.gpu.min(other.gpu),
        }
    }

    pub fn times(self, n: i64) -> Resources {
        Resources { cpu_milli: self.cpu_milli * n, memory_bytes: self.memory_bytes * n, gpu: self.gpu * n }
    }

    /// Each dimension scaled by `f` and rounded up, so a margin never rounds to zero.
    pub fn scaled_up(self, f: f64) -> Resources {
        let s = |v: i64| (v as f64 * f).ceil() as i64;
        Resources { cpu_milli: s(self.cpu_milli), memory_bytes: s(self.memory_bytes), gpu: s(self.gpu) }
    }

    /// How many copies of `unit` fit into `self` (0 when `unit` is zero in every dimension
    /// would be infinite; callers never pass a zero worker, validation rejects it).
    pub fn count_fitting(&self, unit: &Resources) -> i64 {
        let dim = |have: i64, need: i64| if need <= 0 { i64::MAX } else { (have / need).max(0) };
        let n = dim(self.cpu_milli, unit.cpu_milli)
            .min(dim(self.memory_bytes, unit.memory_bytes))
            .min(dim(self.gpu, unit.gpu));
        // A zero unit would fit infinitely often; a negative room fits nothing.
        let negative = self.cpu_milli < 0 || self.memory_bytes < 0 || self.gpu < 0;
        if n == i64::MAX || negative {
            0
        } else {
            n
        }
    }

    /// Largest share of `total` this amount takes in any dimension (dominant resource share).
    pub fn dominant_share(&self, total: &Resources) -> f64 {
        let share = |a: i64, t: i64| if t > 0 { a as f64 / t as f64 } else { 0.0 };
        share(self.cpu_milli, total.cpu_milli)
            .max(share(self.memory_bytes, total.memory_bytes))
            .max(share(self.gpu, total.gpu))
    }

    pub fn cpu_cores(&self) -> f64 {
        self.cpu_milli as f64 / 1000.0
    }
}

impl Add for Resources {
    type Output = Resources;
    fn add(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli + o.cpu_milli,
            memory_bytes: self.memory_bytes + o.memory_bytes,
            gpu: self.gpu + o.gpu,
        }
    }
}

impl AddAssign for Resources {
    fn add_assign(&mut self, o: Resources) {
        *self = *self + o;
    }
}

impl Sub for Resources {
    type Output = Resources;
    fn sub(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli - o.cpu_milli,
            memory_bytes: self.memory_bytes - o.memory_bytes,
            gpu: self.gpu - o.gpu,
        }
    }
}

impl SubAssign for Resources {
    fn sub_assign(&mut self, o: Resources) {
        *self = *self - o;
    }
}

impl std::iter::Sum for Resources {
    fn sum<I: Iterator<Item = Resources>>(iter: I) -> Resources {
        iter.fold(Resources::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu={} memory={}Mi", format_cpu(self.cpu_milli), self.memory_bytes / (1 << 20))?;
        if self.gpu != 0 {
            write!(f, " gpu={}", self.gpu)?;
        }
        Ok(())
    }
}

/// `1500` -> `1.5`, `2000` -> `2`, `250` -> `250m`.
pub fn format_cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else if milli.abs() >= 1000 {
        format!("{:.3}", milli as f64 / 1000.0).trim_end_matches('0').to_string()
    } else {
        format!("{milli}m")
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error(
        "`{0}` is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 512Mi, 4Gi)"
    )]
    Malformed(String),
    #[error("`{0}` is negative; a resource amount must be zero or more")]
    Negative(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5`, `512Mi`, `4Gi`, `1e3`, `10k`) into its value
/// multiplied by `unit_scale` and rounded up (Kubernetes rounds requests up, never down).
fn parse_quantity(s: &str, unit_scale: f64) -> Result<i64, QuantityError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(QuantityError::Empty);
    }
    let malformed = || QuantityError::Malformed(s.to_string());
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(malformed());
    }
    let base: f64 = num.parse().map_err(|_| malformed())?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| malformed())?;
            10f64.powi(exp)
        }
        _ => return Err(malformed()),
    };
    let v = base * mult * unit_scale;
    if !v.is_finite() || v > 9.0e18 {
        return Err(QuantityError::TooLarge(s.to_string()));
    }
    if v < 0.0 {
        return Err(QuantityError::Negative(s.to_string()));
    }
    // Tolerate float noise (0.1 * 1000 = 100.00000000000001) before rounding up.
    Ok((v - 1e-6).ceil().max(0.0) as i64)
}

/// CPU quantity in millicores.
pub fn parse_cpu(s: &str) -> Result<i64, QuantityError> {
    parse_quantity(s, 1000.0)
}

/// Memory quantity in bytes.
pub fn parse_memory(s: &str) -> Result<i64, QuantityError> {
    parse_quantity(s, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_forms() {
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert_eq!(parse_cpu("2"), Ok(2000));
        assert_eq!(parse_cpu("1.5"), Ok(1500));
        assert_eq!(parse_cpu("0.1"), Ok(100));
        assert_eq!(parse_cpu("1e1"), Ok(10_000));
    }

    #[test]
    fn parses_memory_forms() {
        assert_eq!(parse_memory("512Mi"), Ok(512 * 1024 * 1024));
        assert_eq!(parse_memory("4Gi"), Ok(4 << 30));
        assert_eq!(parse_memory("1G"), Ok(1_000_000_000));
        assert_eq!(parse_memory("128974848"), Ok(128_974_848));
    }

    #[test]
    fn rejects_bad_quantities() {
        assert!(matches!(parse_cpu("two"), Err(QuantityError::Malformed(_))));
        assert!(matches!(parse_memory("4GB"), Err(QuantityError::Malformed(_))));
        assert!(matches!(parse_cpu("-1"), Err(QuantityError::Negative(_))));
        assert_eq!(parse_cpu(""), Err(QuantityError::Empty));
    }

    #[test]
    fn counts_packable_units() {
        let node = Resources::new(7_500, 16 << 30, 0);
        let worker = Resources::new(2_000, 4 << 30, 0);
        assert_eq!(node.count_fitting(&worker), 3);
        let mem_bound = Resources::new(64_000, 8 << 30, 0);
        assert_eq!(mem_bound.count_fitting(&worker), 2);
        assert_eq!(Resources::new(-1, 0, 0).count_fitting(&worker), 0);
    }
}
