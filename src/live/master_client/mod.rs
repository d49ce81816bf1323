//! The controller's client of master protocol v1 ([`crate::master_protocol`]): what the
//! actuator calls to read a job's state and to shrink or grow it.
//!
//! - [`http`]: [`MasterClient`] (timeouts, bounded jittered retries, idempotent command ids,
//!   errors labelled for metrics).
//! - [`retry`]: the retry policy, std-only.

pub mod http;
pub mod retry;

pub use http::{read_token_file, ClientConfigError, MasterClient, MasterError, DEFAULT_TIMEOUT};
pub use retry::RetryPolicy;
