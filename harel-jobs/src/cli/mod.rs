//! The `harel-jobs` command line (feature `cli`): look at and steer a queue from a shell,
//! as a thin layer over the public [`Client`](crate::Client) API. See the guide's
//! ["Command line"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/monitoring.md#command-line) for the commands, their JSON and
//! their exit codes.
//!
//! - `args`: the grammar (clap);
//! - `commands`: each subcommand, as calls to the library;
//! - `output`: tables for people, one JSON shape per thing for scripts;
//! - `confirm`: asking before a command changes more than one job;
//! - `error`: failures and their exit codes;
//! - `serve`: `harel-jobs dashboard` (with the `dashboard` feature).

mod args;
mod commands;
mod confirm;
mod error;
mod output;
#[cfg(feature = "dashboard")]
mod serve;

use std::process::ExitCode;

use clap::Parser as _;

use args::Cli;
use commands::Printer;

/// Runs the command line with the process's arguments and environment, and returns its
/// exit code: 0 on success, 1 on a failure (printed on stderr as `error: …`), 2 on a usage
/// error. What the `harel-jobs` binary's `main` does; an application can ship the same
/// tool in its own binary with `fn main() -> ExitCode { harel_jobs::cli::main() }`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version print on stdout and exit 0; usage errors exit 2
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // tables fit the terminal, and colour only a terminal (never a pipe) without NO_COLOR
    output::Terminal::detect().install();
    let out = Printer::new(cli.json);
    match runtime.block_on(commands::run(cli, &out)) {
        Ok(()) => ExitCode::SUCCESS,
        // `harel-jobs … | head`: the reader went away, which is no failure of ours
        Err(error::CliError::Io(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            if let Some(hint) = error.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(error.exit_code())
        }
    }
}
