//! The `#[job]` attribute of harel-jobs.
