//! Scenario value types with units: CPU and memory quantities, durations.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::core::config::duration;
use crate::core::resources::{parse_cpu, parse_memory};

/// CPU in millicores, written as a Kubernetes quantity (`500m`, `2`) or a plain number of cores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cpu(pub i64);

/// Memory in bytes, written as a Kubernetes quantity (`512Mi`, `4Gi`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Memory(pub i64);

#[derive(Deserialize)]
#[serde(untagged)]
enum QuantityText {
    Text(String),
    Number(f64),
}

impl QuantityText {
    fn text(self) -> String {
        match self {
            QuantityText::Text(s) => s,
            QuantityText::Number(n) => n.to_string(),
        }
    }
}

impl<'de> Deserialize<'de> for Cpu {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = QuantityText::deserialize(d)?.text();
        parse_cpu(&s).map(Cpu).map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Memory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = QuantityText::deserialize(d)?.text();
        parse_memory(&s).map(Memory).map_err(serde::de::Error::custom)
    }
}

pub fn optional_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}
