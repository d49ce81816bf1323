//! Command-line wiring: clap definitions and the commands they run.

pub mod allocator;
pub mod example_master;
pub mod logging;
pub mod replay;
pub mod run;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Fill the headroom online services keep with elastic training jobs.
#[derive(Debug, Parser)]
#[command(name = "colocate", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay load-spike scenarios against a simulated cluster and compare policies side by side.
    Replay(replay::ReplayArgs),
    /// Run the controller against the cluster of the in-cluster config or KUBECONFIG.
    Run(colocate::live::config::RunFlags),
    /// Validate a controller configuration file and print the effective settings.
    CheckConfig {
        /// YAML file with `controller:`, `run:` and `services:` blocks.
        file: PathBuf,
    },
    /// Serve master protocol v1 for a job whose workers are one Deployment's replicas (scaled
    /// through its /scale subresource); the template for framework integrators.
    ExampleMaster(example_master::Args),
}
