//! Master protocol v1 and its additions up to v1.2 (`docs/master-protocol.md`): the small HTTP/JSON protocol through which
//! the controller reads an elastic job's state and shrinks or grows it. This module owns the
//! contract; both sides build on it and neither on the other.
//!
//! - [`wire`]: the wire types, named exactly as the contract names them, and
//!   [`command_id`]: fresh ids for `POST /v1/scale`.
//! - [`master_state`]: the master side's semantics without HTTP ([`MasterState`]: the
//!   generation, idempotent command ids, bounds, the phase) over a [`WorkerBackend`]
//!   ([`worker_backend`]). The reference master serves it over HTTP
//!   ([`crate::reference_master`]); the controller's Kubernetes adapters run it in process.
//!
//! The controller's client is [`crate::live::master_client`].

pub mod command_id;
pub mod master_state;
pub mod wire;
pub mod worker_backend;

pub use command_id::new_command_id;
pub use master_state::{MasterConfig, MasterConfigError, MasterState, ScaleError, MAX_COMMAND_ID};
pub use wire::{
    Checkpoint, CheckpointAccepted, CheckpointCommand, ErrorBody, OutOfBoundsBody, Phase, Progress, Quantity,
    ScaleAccepted, ScaleCommand, Status, Throughput, WorkerResources, Workers,
};
pub use worker_backend::{BackendError, BackendErrorKind, MemoryBackend, Observed, WorkerBackend};
