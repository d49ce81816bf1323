//! colocate: fills the headroom online services keep with elastic training jobs.

pub mod core;
pub mod live;
pub mod master_protocol;
pub mod reference_master;
pub mod sim;
pub mod telemetry;
pub mod yaml;
