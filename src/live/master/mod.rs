//! Master protocol v1 (`docs/master-protocol.md`): the small HTTP/JSON protocol through
//! which the controller reads an elastic job's state and shrinks or grows it.
//!
//! - [`types`]: the wire types, named exactly as the contract names them.
//! - [`client`]: [`MasterClient`], what the controller's actuator calls (timeouts, bounded
//!   jittered retries, idempotent command ids, errors labelled for metrics).
//! - [`server`] and [`backend`]: the reference master, serving the protocol over any
//!   [`WorkerBackend`]: in memory (`backend.rs`) or a Deployment's `/scale` subresource (`deployment.rs`;
//!   [`in_place`]: releasing a worker's room by an in-place resize before it exits;
//!   [`modelled`]: the throughput and progress of a modelled job, for test beds).
//! - [`retry`]: the retry policy and command ids, std-only.
//! - [`tls_listener`]: the reference master's https listener.

pub mod backend;
pub mod client;
pub mod deployment;
pub mod in_place;
pub mod modelled;
pub mod removal;
pub mod retry;
pub mod server;
pub mod tls_listener;
pub mod types;

pub use backend::{BackendError, BackendErrorKind, MemoryBackend, Observed, WorkerBackend};
pub use client::{read_token_file, ClientConfigError, MasterClient, MasterError, DEFAULT_TIMEOUT};
pub use retry::{new_command_id, RetryPolicy};
pub use server::{router, serve, serve_with_shutdown, MasterConfig, MasterConfigError, MasterState, ScaleError};
pub use types::{
    ErrorBody, OutOfBoundsBody, Phase, Progress, Quantity, ScaleAccepted, ScaleCommand, Status, Throughput,
    WorkerResources, Workers,
};

// Used by this module's clients and backends; defined where the whole live side can use it.
pub(crate) use super::error_chain;
