//! The `harel-jobs` command line: see `harel-jobs --help` and the README's "Command line".

fn main() -> std::process::ExitCode {
    harel_jobs::cli::main()
}
