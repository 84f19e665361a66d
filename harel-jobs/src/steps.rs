//! Durable steps: the results a job's handler recorded with
//! [`JobContext::step`](crate::JobContext::step), as one attempt sees them.
//!
//! A [`StepLog`] belongs to one execution. Under a worker it reads the job's recorded steps
//! once, at the first step call of the attempt (`harel_steps`, one round trip, fenced on the
//! lease), keeps them for the rest of the attempt, and records each new result
//! (`harel_record_step`, fenced on the lease) on a connection of the application's pool,
//! bounded by the worker's database timeout. A handler that never calls `step` costs no
//! round trip. In a [`for_test`](crate::JobContext::for_test) context there is no lease: the
//! results are kept in memory, shared by the context's clones and the contexts made from it
//! with the `with_*` setters.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use tokio::sync::Mutex;

use crate::error::{DatabaseError, StepError};
use crate::store::{HeldLease, Store, TaskOfJobRow};
use crate::transport::Lease;
use crate::vocabulary::{
    MAX_STEP_BYTES_PER_JOB, MAX_STEP_NAME_BYTES, MAX_STEP_RESULT_BYTES, MAX_STEPS_PER_JOB,
};
use crate::worker::connection::{bounded, on_pooled};

/// Where a job's steps are kept.
#[derive(Debug)]
enum Backend {
    /// In memory: a context made by `for_test`.
    Memory,
    /// In the queue's `job_steps`, under the worker's lease.
    Database(Database),
}

/// What a worker's step calls need.
#[derive(Debug)]
pub(crate) struct Database {
    pub(crate) store: Store,
    pub(crate) pool: PgPool,
    /// Behind a transaction pooler: each call in a transaction of its own.
    pub(crate) pooler: bool,
    /// The worker's database timeout, which bounds each call.
    pub(crate) timeout: Duration,
    pub(crate) lease: Lease,
}

/// The steps recorded, as this attempt knows them: name → JSON text.
#[derive(Debug, Default)]
struct Recorded {
    results: HashMap<String, String>,
    bytes: usize,
}

impl Recorded {
    fn insert(&mut self, name: &str, result: String) {
        self.bytes += result.len();
        if let Some(previous) = self.results.insert(name.to_owned(), result) {
            self.bytes -= previous.len();
        }
    }

    fn full(&self, name: &str, adding: usize) -> Option<StepError> {
        let over = self.results.len() >= MAX_STEPS_PER_JOB
            || self.bytes.saturating_add(adding) > MAX_STEP_BYTES_PER_JOB;
        over.then(|| StepError::JobFull {
            name: name.to_owned(),
            steps: self.results.len(),
            bytes: self.bytes,
        })
    }
}

/// What recording a step came to.
pub(crate) enum Record {
    /// Recorded now: the caller's result stands.
    Recorded,
    /// A result was recorded under this name before (the first one stays): this one.
    Before(String),
}

/// One execution's durable steps.
#[derive(Debug)]
pub(crate) struct StepLog {
    backend: Backend,
    /// `None` until the first step call of the attempt read them.
    recorded: Mutex<Option<Recorded>>,
}

impl StepLog {
    /// Steps kept in memory (`for_test`).
    pub(crate) fn in_memory() -> Self {
        Self {
            backend: Backend::Memory,
            recorded: Mutex::new(Some(Recorded::default())),
        }
    }

    /// Steps in the database, read at the first call.
    pub(crate) fn in_database(database: Database) -> Self {
        Self {
            backend: Backend::Database(database),
            recorded: Mutex::new(None),
        }
    }

    /// Where the job's lease can be read under (none in a `for_test` context): the
    /// workflow a task belongs to is read there too (`JobContext::workflow`).
    pub(crate) fn database(&self) -> Option<&Database> {
        match &self.backend {
            Backend::Memory => None,
            Backend::Database(database) => Some(database),
        }
    }

    /// Checks a step name's length.
    pub(crate) fn check_name(name: &str) -> Result<(), StepError> {
        if name.is_empty() || name.len() > MAX_STEP_NAME_BYTES {
            return Err(StepError::InvalidName { bytes: name.len() });
        }
        Ok(())
    }

    /// The result recorded under `name`, reading the job's steps first if this attempt has
    /// not yet; or, when there is none, whether one more step has room.
    pub(crate) async fn recorded(&self, name: &str) -> Result<Option<String>, StepError> {
        let mut recorded = self.recorded.lock().await;
        if recorded.is_none() {
            *recorded = Some(self.read(name).await?);
        }
        let Some(recorded) = recorded.as_ref() else {
            return Err(StepError::UnexpectedReply); // just set
        };
        if let Some(result) = recorded.results.get(name) {
            return Ok(Some(result.clone()));
        }
        match recorded.full(name, 0) {
            Some(full) => Err(full),
            None => Ok(None),
        }
    }

    /// Records `result` (JSON text) as the step `name`.
    pub(crate) async fn record(&self, name: &str, result: String) -> Result<Record, StepError> {
        if result.len() > MAX_STEP_RESULT_BYTES {
            return Err(StepError::ResultTooLarge {
                name: name.to_owned(),
                bytes: result.len(),
            });
        }
        // one record at a time per attempt: the limits are checked against what it knows
        let mut guard = self.recorded.lock().await;
        let recorded = guard.get_or_insert_with(Recorded::default);
        if let Some(before) = recorded.results.get(name) {
            // a concurrent call of the same step recorded first
            return Ok(Record::Before(before.clone()));
        }
        if let Some(full) = recorded.full(name, result.len()) {
            return Err(full);
        }
        let outcome = match &self.backend {
            Backend::Memory => Record::Recorded,
            Backend::Database(database) => database.record(name, &result).await?,
        };
        match &outcome {
            Record::Recorded => recorded.insert(name, result),
            Record::Before(before) => recorded.insert(name, before.clone()),
        }
        Ok(outcome)
    }

    /// The job's recorded steps (nothing to read in memory).
    async fn read(&self, name: &str) -> Result<Recorded, StepError> {
        match &self.backend {
            Backend::Memory => Ok(Recorded::default()),
            Backend::Database(database) => database.read(name).await,
        }
    }
}

impl Database {
    /// `harel_workflow_task`: the workflow of the job this lease holds, if it is a task.
    pub(crate) async fn workflow_task(&self) -> Result<Option<TaskOfJobRow>, DatabaseError> {
        let lease = self.lease();
        let store = &self.store;
        bounded(
            self.timeout,
            on_pooled(
                &self.pool,
                self.pooler,
                async |connection: &mut PgConnection| {
                    store.workflow_task_if_held(connection, lease).await
                },
            ),
        )
        .await
        .map_err(DatabaseError::new)
    }

    fn lease(&self) -> HeldLease<'_> {
        HeldLease {
            group: &self.lease.group,
            seq: self.lease.id.get(),
            token: self.lease.token.as_uuid(),
        }
    }

    /// `harel_steps`: one round trip.
    async fn read(&self, name: &str) -> Result<Recorded, StepError> {
        let lease = self.lease();
        let store = &self.store;
        let (held, names, results) = bounded(
            self.timeout,
            on_pooled(
                &self.pool,
                self.pooler,
                async |connection: &mut PgConnection| {
                    store.steps_read_if_held(connection, lease).await
                },
            ),
        )
        .await
        .map_err(DatabaseError::new)?;
        if !held {
            return Err(StepError::LeaseLost {
                name: name.to_owned(),
            });
        }
        let names = names.unwrap_or_default();
        let results = results.unwrap_or_default();
        if names.len() != results.len() {
            return Err(StepError::UnexpectedReply);
        }
        let mut recorded = Recorded::default();
        for (name, result) in names.into_iter().zip(results) {
            recorded.insert(&name, result);
        }
        Ok(recorded)
    }

    /// `harel_record_step`: one round trip.
    async fn record(&self, name: &str, result: &str) -> Result<Record, StepError> {
        let lease = self.lease();
        let store = &self.store;
        let (outcome, before) = bounded(
            self.timeout,
            on_pooled(
                &self.pool,
                self.pooler,
                async |connection: &mut PgConnection| {
                    store
                        .step_record_if_held(connection, lease, name, result)
                        .await
                },
            ),
        )
        .await
        .map_err(DatabaseError::new)?;
        match (outcome.as_str(), before) {
            ("recorded", _) => Ok(Record::Recorded),
            ("exists", Some(before)) => Ok(Record::Before(before)),
            ("lost", _) => Err(StepError::LeaseLost {
                name: name.to_owned(),
            }),
            // the database's count: another attempt's records this one has not read
            ("full", _) => Err(StepError::JobFull {
                name: name.to_owned(),
                steps: MAX_STEPS_PER_JOB,
                bytes: MAX_STEP_BYTES_PER_JOB,
            }),
            _ => Err(StepError::UnexpectedReply),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_to_255_bytes() {
        assert!(StepLog::check_name("").is_err());
        assert!(StepLog::check_name("charge").is_ok());
        assert!(StepLog::check_name(&"é".repeat(127)).is_ok()); // 254 bytes
        assert!(StepLog::check_name(&"x".repeat(MAX_STEP_NAME_BYTES)).is_ok());
        assert!(matches!(
            StepLog::check_name(&"x".repeat(MAX_STEP_NAME_BYTES + 1)),
            Err(StepError::InvalidName { bytes: 256 })
        ));
    }

    #[tokio::test]
    async fn in_memory_the_first_record_of_a_name_stays_and_the_limits_hold() {
        let log = StepLog::in_memory();
        assert!(log.recorded("a").await.unwrap().is_none());
        assert!(matches!(
            log.record("a", "1".to_owned()).await,
            Ok(Record::Recorded)
        ));
        assert!(matches!(
            log.record("a", "2".to_owned()).await,
            Ok(Record::Before(before)) if before == "1"
        ));
        assert_eq!(log.recorded("a").await.unwrap().as_deref(), Some("1"));
        let big = format!("\"{}\"", "x".repeat(MAX_STEP_RESULT_BYTES));
        assert!(matches!(
            log.record("big", big).await,
            Err(StepError::ResultTooLarge { .. })
        ));
        assert!(
            log.recorded("big").await.unwrap().is_none(),
            "nothing stored"
        );
        // eight results of just under 1 MiB fill the job's 8 MiB
        let almost = format!("\"{}\"", "x".repeat(MAX_STEP_RESULT_BYTES - 2));
        for n in 0..7 {
            assert!(log.record(&format!("m{n}"), almost.clone()).await.is_ok());
        }
        assert!(matches!(
            log.record("m7", almost).await,
            Err(StepError::JobFull { steps: 8, .. })
        ));
        assert_eq!(log.recorded("a").await.unwrap().as_deref(), Some("1"));
    }

    #[tokio::test]
    async fn in_memory_at_most_1000_steps() {
        let log = StepLog::in_memory();
        for n in 0..MAX_STEPS_PER_JOB {
            assert!(log.record(&n.to_string(), "0".to_owned()).await.is_ok());
        }
        assert!(matches!(
            log.recorded("one more").await,
            Err(StepError::JobFull { steps: 1000, .. })
        ));
        assert!(log.recorded("7").await.unwrap().is_some());
    }
}
