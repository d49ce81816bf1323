//! `colocate` binary: clap wiring only.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    // Before any HTTP client is built: reqwest has no crypto provider of its own here.
    colocate::live::tls::install_crypto_provider();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Run(_)) {
        cli::allocator::hold_mmap_threshold();
    }
    match cli.command {
        Command::CheckConfig { file } => match colocate::live::config::check_file(&file) {
            Ok(config) => {
                print!("{}", config.describe());
                for warning in config.warnings() {
                    eprintln!("warning: {warning}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Replay(args) => match cli::replay::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(cli::replay::ReplayError::BadInput(e)) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
            Err(cli::replay::ReplayError::Other(e)) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Run(flags) => match cli::run::run(&flags) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e @ cli::run::RunError::Config(_)) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
            Err(e @ cli::run::RunError::Runtime(_)) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::ExampleMaster(args) => match cli::example_master::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e @ cli::example_master::ExampleMasterError::Config(_)) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
            Err(e @ cli::example_master::ExampleMasterError::Runtime(_)) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
