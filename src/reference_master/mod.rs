//! The reference master: master protocol v1 ([`crate::master_protocol`]) served over HTTP for
//! jobs whose framework has no scaling API, run by `colocate example-master` next to the workers
//! and meant to be copied by integrators. A program of its own: the controller does not use it.
//!
//! - [`http_server`]: the protocol's routes over a [`MasterState`](crate::master_protocol::MasterState)
//!   (bearer token, body parsing, status codes); [`tls_listener`]: its https listener.
//! - [`deployment_backend`]: the worker count of a Deployment through its `/scale` subresource;
//!   [`removal`]: which workers a shrink removes; [`in_place`]: releasing a worker's room by an
//!   in-place resize before it exits.
//! - [`modelled`]: the throughput and progress of a modelled job, for test beds.

pub mod deployment_backend;
pub mod http_server;
pub mod in_place;
pub mod modelled;
pub mod removal;
pub mod tls_listener;

pub use http_server::{router, serve, serve_with_shutdown};
