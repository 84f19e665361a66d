//! The `harel-jobs` command line: see `harel-jobs --help` and the guide's "Command line"
//! (docs/guide/monitoring.md).

fn main() -> std::process::ExitCode {
    harel_jobs::cli::main()
}
