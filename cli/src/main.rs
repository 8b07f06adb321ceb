//! The `agentaddress` binary: `serve` runs the whole API on one port over the embedded store.
#![forbid(unsafe_code)]

mod serve;

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
    Serve(serve::ServeArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
    }
}
