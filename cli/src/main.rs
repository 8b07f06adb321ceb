//! The `agentaddress` binary: `serve` runs the whole API on one port over the embedded store;
//! `purge-worker` consumes the AWS deployment's purge queue; `create`, `handoff`, `poll`,
//! `wait`, `ack` and `state` are the command-line client (docs/CLI.md).
#![forbid(unsafe_code)]

mod backup;
mod client;
mod metrics;
mod purge;
mod serve;
mod smarthost;
mod smtp;
mod socket;
mod transport;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "agentaddress",
    version,
    about = "Durable return addresses for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API on the embedded SQLite store.
    Serve(Box<serve::ServeArgs>),
    /// Consume the purge queue of the AWS deployment (what the `purge` Lambda does), by
    /// long-polling SQS: for local stacks and for running purges outside Lambda.
    PurgeWorker(purge::PurgeArgs),
    /// Copy the embedded store's database to a new file, consistently, while serve runs.
    Backup(backup::BackupArgs),
    #[command(flatten)]
    Client(client::ClientCommand),
}

/// The multi-threaded runtime every subcommand runs on; `None` (after saying why) if the OS
/// refuses it.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            None
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::PurgeWorker(args) => purge::run(args),
        Command::Backup(args) => backup::run(args),
        Command::Client(command) => client::run(command),
    }
}
