//! Replay: scenario files (scenario-v1), a simulated cluster around the decision core, the
//! baseline policies, and the report.

mod accounting;
pub mod axis;
pub mod chart;
pub mod chart_series;
pub mod cluster;
mod cpu_share;
mod deployment;
pub mod engine;
pub mod explain;
pub mod go_sort;
pub mod jct_chart;
pub mod job_model;
pub mod job_trace;
pub mod limits;
pub mod load;
mod master_model;
pub mod policy;
pub mod report;
pub mod scenario;
pub mod scheduler_queue;
pub mod service;
pub mod side_by_side;
pub mod snapshot;
pub mod spec;
pub mod spike;
pub mod svg;
pub mod units;
mod usage;
mod usage_scrapes;
pub mod window;
pub mod window_plan;
pub mod worth;

/// Errors in a scenario file name the file, line and key.
pub use crate::yaml::InputError as ScenarioError;
pub use policy::Policy;
pub use scenario::Scenario;
pub use side_by_side::{replay, ReplayOutput};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_many_jobs;
#[cfg(test)]
mod tests_model;
#[cfg(test)]
mod tests_usage;
