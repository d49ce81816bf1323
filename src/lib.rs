//! colocate: fills the headroom online services keep with elastic training jobs.

pub mod core;
pub mod live;
pub mod sim;
pub mod telemetry;
pub mod yaml;
