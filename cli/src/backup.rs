//! `agentaddress backup`: a consistent copy of the embedded store's database, safe while
//! `agentaddress serve` runs on it (agentaddress_sqlite::backup; README, "Backups").
//! It takes no lock: `serve`'s lock file keeps out a second server, not readers (README, "One
//! server per database file").

use std::path::PathBuf;
use std::process::ExitCode;

/// The database to copy and where to put the copy.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The database file `agentaddress serve --db` uses.
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// The new file to write (it must not exist). Restore by stopping serve and starting it
    /// with `--db` naming this file (or a copy of it).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

pub fn run(args: BackupArgs) -> ExitCode {
    match agentaddress_sqlite::backup(&args.db, &args.out) {
        Ok(r) => {
            println!(
                "backed up {} to {}: {} bytes, schema version {}, {} addresses, {} events \
                 (integrity check ok)",
                args.db.display(),
                args.out.display(),
                r.bytes,
                r.schema_version,
                r.addresses,
                r.events
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            use agentaddress_sqlite::BackupError as E;
            match e {
                // These name their file already: the path once.
                E::NoSource(_) | E::Exists(_) | E::NotOurs(..) => {
                    eprintln!("error: backup failed: {e}")
                }
                _ => eprintln!("error: backup of {} failed: {e}", args.db.display()),
            }
            ExitCode::FAILURE
        }
    }
}
