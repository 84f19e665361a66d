//! The job types of the fault-injection suite, shared by the suite (which enqueues them)
//! and by the `harel-fault-worker` binary (which runs them), and the ledger they write.
//!
//! Every job carries a `key`: a number the test chose, unique across the run, so that the
//! checks identify a job by what the producer meant rather than by its message id (message
//! ids of transactions that never committed can be handed out again after a crash).

#![allow(dead_code)]

use harel_jobs::{Job, JobOptions};
use serde::{Deserialize, Serialize};

/// Records its execution in the ledger, sleeps `sleep_ms`, records its end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Work {
    pub key: i64,
    #[serde(default)]
    pub sleep_ms: u64,
    /// Copied into the ledger's `note` (hostile-string scenario), byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl Job for Work {
    const KIND: &'static str = "work";
}

/// Records its execution, sleeps `sleep_ms` or until its context is cancelled (the heartbeat
/// found its lease lost, or the job was cancelled), whichever comes first, records its end:
/// a handler that stops when told to.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cooperative {
    pub key: i64,
    pub sleep_ms: u64,
}

impl Job for Cooperative {
    const KIND: &'static str = "cooperative";
}

/// The attempts of the poison kinds ([`Panics`], [`Hangs`], [`Aborts`]): their own, fewer than
/// the worker's default, so that a good job sharing a process with the aborting job at
/// each of its deaths (each a lapsed attempt for every job that process held) still has
/// one left.
pub const POISON_ATTEMPTS: u32 = 3;

/// Records its start, then panics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Panics {
    pub key: i64,
}

impl Job for Panics {
    const KIND: &'static str = "panics";

    fn options() -> JobOptions {
        JobOptions::new().max_attempts(POISON_ATTEMPTS)
    }
}

/// Records its start, then never returns (only its timeout ends it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hangs {
    pub key: i64,
}

impl Job for Hangs {
    const KIND: &'static str = "hangs";

    fn options() -> JobOptions {
        JobOptions::new().max_attempts(POISON_ATTEMPTS)
    }
}

/// Records its start, then `std::process::abort`s its worker process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Aborts {
    pub key: i64,
}

impl Job for Aborts {
    const KIND: &'static str = "aborts";

    fn options() -> JobOptions {
        JobOptions::new().max_attempts(POISON_ATTEMPTS)
    }
}

/// The schema of the ledger and of the test's own bookkeeping, in the queue's database.
pub const LEDGER_SCHEMA: &str = "rel";

/// Creates the ledger and the bookkeeping tables (idempotent).
///
/// - `ledger`: one row per execution, inserted when the handler starts and completed when
///   it ends, both with the database's `clock_timestamp()`: a worker killed mid-run leaves a
///   row without `ended_at`. `exec_id` is chosen by the handler, so a write retried after a
///   lost connection is not recorded twice.
/// - `expected`: the keys the test enqueued (and, in the database-kill scenario, saw commit).
/// - `forbidden`: keys whose enqueue never committed: they must never run.
/// - `exits`: when each worker process incarnation ended and how (`kill`, `term`, `abort`),
///   recorded by the test after the process was reaped.
pub const LEDGER_DDL: &str = "
CREATE SCHEMA IF NOT EXISTS rel;
CREATE TABLE IF NOT EXISTS rel.ledger (
    exec_id    UUID        PRIMARY KEY,
    key        BIGINT      NOT NULL,
    message_id BIGINT      NOT NULL,
    group_id   TEXT        NOT NULL,
    kind       TEXT        NOT NULL,
    attempt    INT         NOT NULL,
    worker     TEXT        NOT NULL,
    pid        INT         NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    ended_at   TIMESTAMPTZ,
    note       BYTEA
);
CREATE INDEX IF NOT EXISTS ledger_group ON rel.ledger (group_id, started_at);
CREATE INDEX IF NOT EXISTS ledger_key ON rel.ledger (key);
CREATE TABLE IF NOT EXISTS rel.expected (
    key      BIGINT PRIMARY KEY,
    group_id TEXT   NOT NULL
);
CREATE TABLE IF NOT EXISTS rel.forbidden (
    key BIGINT PRIMARY KEY,
    why TEXT   NOT NULL
);
CREATE TABLE IF NOT EXISTS rel.exits (
    worker    TEXT        PRIMARY KEY,
    how       TEXT        NOT NULL,
    exited_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
";
