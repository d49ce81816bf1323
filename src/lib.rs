//! colocate: fills the headroom online services keep with elastic training jobs.

/// The decision core (the `colocate-core` crate, crates/core): `run` and `replay` both feed it
/// snapshots and act on its intents.
pub use colocate_core as core;
pub mod live;
pub mod master_protocol;
pub mod reference_master;
pub mod sim;
pub mod telemetry;
pub mod yaml;
