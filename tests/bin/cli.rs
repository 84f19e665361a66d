//! The `harel-jobs` command line, built in this package so that tests/cli.rs can run it.

fn main() -> std::process::ExitCode {
    harel_jobs::cli::main()
}
