//! The decision core: pure, synchronous, no I/O, no clock, no randomness.
//! `run` and `replay` both feed it snapshots and act on its intents.

pub mod capacity;
pub mod completion;
pub mod config;
pub mod damping;
pub mod decide;
mod fewest_jobs;
pub mod fill;
pub mod forecast;
pub mod guard;
pub mod intent;
pub mod metric_trend;
pub mod name_map;
pub mod placer;
pub mod plan;
pub mod pod_index;
pub mod publish;
pub mod replicas;
pub mod resources;
pub mod snapshot;

pub use config::{CapacityMode, Config};
pub use decide::{Core, Decision};
pub use intent::{NodeCapacity, Reason, ScaleIntent};
pub use resources::Resources;
pub use snapshot::{
    Hpa, HpaMetric, Job, Latency, Node, Pod, PodClass, Sample, Service, SharedName, Snapshot, WorkReport,
};

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_completion;
#[cfg(test)]
mod tests_fewest_jobs;
#[cfg(test)]
mod tests_forecast;
#[cfg(test)]
mod tests_queue;
#[cfg(test)]
mod tests_rules;
#[cfg(test)]
mod tests_usage;
