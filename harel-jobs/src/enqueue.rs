//! Enqueueing typed jobs: [`Enqueue`] (one job, with options) and [`JobBatch`] (many, each
//! with [`EnqueueOptions`]).

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::error::PublishError;
use crate::job::{Job, Unique};
use crate::schema::Schema;
use crate::transport::{OutgoingMessage, PreparedStatements, Published, StartAt, Transport};
use crate::vocabulary::{InvalidMessage, JobId, Priority};

/// The options of one job in a [`JobBatch`] ([`JobBatch::push_with`]): the ones an
/// [`Enqueue`] takes, under the same names. Every option is optional; one value can be
/// used for many jobs.
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::EnqueueOptions;
///
/// let later = EnqueueOptions::new().delay(Duration::from_secs(60)).priority(4);
/// let for_user = later.clone().group("user-42");
/// ```
#[derive(Clone, Debug, Default)]
pub struct EnqueueOptions {
    group: Option<String>,
    priority: Option<u8>,
    start_at: StartAt,
    unique: Option<Unique>,
    queue: Option<String>,
}

impl EnqueueOptions {
    /// No option set: the job's own group (or one of its own), its type's priority, due at
    /// once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts the job in this group instead of the one `#[group]` gives (or its own).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Sets the priority, 0 (lowest) to 4 (highest); it applies if this job creates its
    /// group. Out of range: the job is refused with [`InvalidMessage::InvalidPriority`].
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Starts the job no sooner than `delay` from its enqueue (database clock). Replaces a
    /// not-before time set before.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.start_at = StartAt::After(delay);
        self
    }

    /// Starts the job no sooner than `time` (compared with the database's clock; the time is
    /// the caller's, so prefer [`delay`](Self::delay) for "in ten minutes"). Replaces a
    /// delay set before.
    pub fn not_before(mut self, time: DateTime<Utc>) -> Self {
        self.start_at = StartAt::At(time);
        self
    }

    /// Makes the job unique under `unique`'s key, instead of the key its type gives (if
    /// any): see [`Unique`]. A duplicate is reported as [`PublishError::Duplicate`] (by
    /// [`JobBatch::enqueue_each`] as [`Enqueued::Duplicate`]).
    pub fn unique(mut self, unique: Unique) -> Self {
        self.unique = Some(unique);
        self
    }

    /// Puts the job in the named queue instead of its type's ([`Job::QUEUE`]). A group
    /// belongs to one queue: see [`PublishError::GroupInAnotherQueue`].
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The message for `job`: group override, else the job's group, else a fresh one; with
    /// the current span's trace context (feature `opentelemetry`).
    pub(crate) fn message<J: Job>(&self, job: &J) -> Result<OutgoingMessage, PublishError> {
        let group = self.group.clone().or_else(|| job.group());
        let priority = match self.priority {
            Some(p) => Priority::new(p).map_err(InvalidMessage::from)?,
            None => J::options().priority.unwrap_or_default(),
        };
        let mut message =
            OutgoingMessage::serialize(group.as_deref().unwrap_or_default(), J::KIND, job)
                .map_err(PublishError::Serialize)?;
        if group.is_none() {
            message = message.in_own_group();
        }
        if let Some(unique) = self.unique.clone().or_else(|| job.unique()) {
            message = message.unique(unique.key(), unique.hold());
        }
        // the enqueuing span's trace context (feature `opentelemetry`; otherwise none)
        if let Some(context) = crate::trace_context::current() {
            message = message.trace_context(context);
        }
        let queue = self.queue.as_deref().unwrap_or(J::QUEUE);
        Ok(message
            .priority(priority)
            .start_at(self.start_at)
            .queue(queue))
    }
}

/// The transport of the default schema, built once.
pub(crate) fn default_transport() -> &'static Transport {
    static DEFAULT: OnceLock<Transport> = OnceLock::new();
    DEFAULT.get_or_init(Transport::default)
}

fn transport_for(schema: Option<&Schema>, statements: PreparedStatements) -> Transport {
    let transport = match schema {
        Some(schema) if *schema != Schema::default() => Transport::new(schema.clone()),
        _ => default_transport().clone(),
    };
    transport.prepared_statements(statements)
}

/// One job on its way into the queue; options first, then `.await`.
///
/// Created by the `enqueue` method `#[job]` generates (or [`Enqueue::new`]). Runs on the
/// executor it was given: inside a transaction, the job exists if and only if that
/// transaction commits.
///
/// ```no_run
/// # use harel_jobs::{Enqueue, Job};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
/// # impl Job for Ping { const KIND: &'static str = "ping"; }
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let mut tx = pool.begin().await?;
/// let id = Enqueue::new(Ping, &mut *tx)
///     .delay(Duration::from_secs(60))
///     .priority(4)
///     .group("user-42")
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[must_use = "an enqueue does nothing until awaited"]
pub struct Enqueue<'c, J, E> {
    job: J,
    executor: E,
    options: EnqueueOptions,
    schema: Option<Schema>,
    statements: PreparedStatements,
    _connection: PhantomData<&'c ()>,
}

impl<'c, J: Job, E: PgExecutor<'c>> Enqueue<'c, J, E> {
    /// Enqueues `job` through `executor` (a pool, a connection or a transaction).
    pub fn new(job: J, executor: E) -> Self {
        Self {
            job,
            executor,
            options: EnqueueOptions::default(),
            schema: None,
            statements: PreparedStatements::default(),
            _connection: PhantomData,
        }
    }

    /// Starts the job no sooner than `delay` from now (database clock). Replaces a
    /// not-before time set before.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.options = self.options.delay(delay);
        self
    }

    /// Starts the job no sooner than `time` (compared with the database's clock; the time is
    /// the caller's, so prefer [`delay`](Self::delay) for "in ten minutes"). Replaces a
    /// delay set before.
    pub fn not_before(mut self, time: DateTime<Utc>) -> Self {
        self.options = self.options.not_before(time);
        self
    }

    /// Sets the priority, 0 (lowest) to 4 (highest); it applies if this job creates its
    /// group. Out of range: the await fails with [`InvalidMessage::InvalidPriority`].
    pub fn priority(mut self, priority: u8) -> Self {
        self.options = self.options.priority(priority);
        self
    }

    /// Puts the job in this group instead of the one `#[group]` gives (or its own).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.options = self.options.group(group);
        self
    }

    /// Makes the job unique under `unique`'s key (see [`EnqueueOptions::unique`]): if the
    /// key is held, the await fails with [`PublishError::Duplicate`], writes nothing, and
    /// leaves the transaction usable.
    pub fn unique(mut self, unique: Unique) -> Self {
        self.options = self.options.unique(unique);
        self
    }

    /// Puts the job in the named queue instead of its type's (see
    /// [`EnqueueOptions::queue`]).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.options = self.options.queue(queue);
        self
    }

    /// Enqueues into the queue in `schema` instead of the default `harel`.
    pub fn schema(mut self, schema: &Schema) -> Self {
        self.schema = Some(schema.clone());
        self
    }

    /// Sends the statement as `statements` says (default [`PreparedStatements::Cached`]).
    /// Behind a transaction pooler that does not track prepared statements (PgBouncer
    /// before 1.21), use [`PreparedStatements::Unnamed`] and enqueue inside a transaction.
    pub fn prepared_statements(mut self, statements: PreparedStatements) -> Self {
        self.statements = statements;
        self
    }
}

impl<'c, J: Job, E: PgExecutor<'c> + 'c> IntoFuture for Enqueue<'c, J, E> {
    type Output = Result<JobId, PublishError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'c>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let message = self.options.message(&self.job)?;
            let transport = transport_for(self.schema.as_ref(), self.statements);
            let outcomes = transport
                .publish_many_outcomes(self.executor, std::slice::from_ref(&message))
                .await?;
            match outcomes.first().copied().map(Enqueued::from) {
                Some(Enqueued::New(id)) => {
                    crate::telemetry::enqueued(J::KIND, message.queue_name(), 1);
                    Ok(id)
                }
                Some(Enqueued::Duplicate { existing }) => Err(PublishError::Duplicate { existing }),
                None => Err(PublishError::Database(crate::error::DatabaseError::new(
                    sqlx::Error::RowNotFound,
                ))),
            }
        })
    }
}

/// Many jobs, of any kinds, enqueued in one round trip, each with options of its own.
///
/// At most [`MAX_BATCH_MESSAGES`](crate::transport::MAX_BATCH_MESSAGES) jobs and
/// [`MAX_BATCH_BYTES`](crate::transport::MAX_BATCH_BYTES) of payloads, group ids and kinds:
/// [`enqueue`](Self::enqueue) refuses larger batches before sending anything.
///
/// ```no_run
/// # use harel_jobs::{EnqueueOptions, Job, JobBatch};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping(u32);
/// # impl Job for Ping { const KIND: &'static str = "ping"; }
/// # async fn example(pool: sqlx::PgPool) -> Result<(), harel_jobs::PublishError> {
/// use std::time::Duration;
///
/// let mut batch = JobBatch::new();
/// for n in 0..1000 {
///     batch.push(Ping(n))?;
/// }
/// let urgent = EnqueueOptions::new().priority(4);
/// batch.push_with(Ping(1000), &urgent)?;
/// batch.push_with(Ping(1001), &urgent.clone().delay(Duration::from_secs(60)))?;
/// let ids = batch.enqueue(&pool).await?;
/// assert_eq!(ids.len(), 1002);
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct JobBatch {
    messages: Vec<OutgoingMessage>,
    schema: Option<Schema>,
    statements: PreparedStatements,
}

impl JobBatch {
    /// An empty batch for the default schema.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch for the queue in `schema`.
    pub fn for_schema(schema: &Schema) -> Self {
        Self {
            messages: Vec::new(),
            schema: Some(schema.clone()),
            statements: PreparedStatements::default(),
        }
    }

    /// Sends the statement as `statements` says (default [`PreparedStatements::Cached`]);
    /// see [`Enqueue::prepared_statements`].
    pub fn prepared_statements(mut self, statements: PreparedStatements) -> Self {
        self.statements = statements;
        self
    }

    /// Adds a job as a plain enqueue would: in its own group (the one `#[group]` gives, or a
    /// group of its own), at its type's priority, due at once.
    ///
    /// # Errors
    /// [`PublishError::Serialize`] if it does not serialise, [`PublishError::Invalid`] if
    /// the message would be refused. The batch is unchanged then.
    pub fn push<J: Job>(&mut self, job: J) -> Result<&mut Self, PublishError> {
        self.push_with(job, &EnqueueOptions::new())
    }

    /// Adds a job with `options`: group, priority, delay or not-before time, as
    /// [`Enqueue`] sets them.
    ///
    /// # Errors
    /// As [`push`](Self::push); an out-of-range priority is
    /// [`InvalidMessage::InvalidPriority`].
    pub fn push_with<J: Job>(
        &mut self,
        job: J,
        options: &EnqueueOptions,
    ) -> Result<&mut Self, PublishError> {
        let message = options.message(&job)?;
        message.validate()?;
        self.messages.push(message);
        Ok(self)
    }

    /// Adds a job into `group`, overriding its own: short for
    /// `push_with(job, &EnqueueOptions::new().group(group))`.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn push_to_group<J: Job>(
        &mut self,
        job: J,
        group: impl Into<String>,
    ) -> Result<&mut Self, PublishError> {
        self.push_with(job, &EnqueueOptions::new().group(group))
    }

    /// How many jobs it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Enqueues every job in one round trip, in order (jobs of one group keep the batch's
    /// order). Returns their ids in the same order.
    ///
    /// # Errors
    /// [`PublishError::Invalid`] for a batch over the limits above
    /// ([`InvalidMessage::TooManyMessages`], [`InvalidMessage::BatchTooLarge`]), before
    /// anything is sent; [`PublishError::Database`]. Nothing is written then.
    pub async fn enqueue<'c, E: PgExecutor<'c>>(
        self,
        executor: E,
    ) -> Result<Vec<JobId>, PublishError> {
        let outcomes = self.enqueue_each(executor).await?;
        Ok(outcomes.into_iter().map(Enqueued::id).collect())
    }

    /// Enqueues every job as [`enqueue`](Self::enqueue) does, saying for each whether it
    /// was queued or is a duplicate of a queued unique job (nothing written for it). The
    /// first job of the batch with a key takes it; later ones are its duplicates.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_each<'c, E: PgExecutor<'c>>(
        self,
        executor: E,
    ) -> Result<Vec<Enqueued>, PublishError> {
        let transport = transport_for(self.schema.as_ref(), self.statements);
        let outcomes = transport
            .publish_many_outcomes(executor, &self.messages)
            .await?;
        let outcomes: Vec<Enqueued> = outcomes.into_iter().map(Enqueued::from).collect();
        #[cfg(feature = "metrics")]
        for (message, outcome) in self.messages.iter().zip(&outcomes) {
            if let Enqueued::New(_) = outcome {
                crate::telemetry::enqueued(message.kind(), message.queue_name(), 1);
            }
        }
        Ok(outcomes)
    }
}

/// What an enqueue did with one job of a [`JobBatch`] ([`JobBatch::enqueue_each`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Enqueued {
    /// Queued under this id.
    New(JobId),
    /// Not queued: a unique job whose key the job `existing` holds.
    Duplicate {
        /// The job that holds the key.
        existing: JobId,
    },
}

impl Enqueued {
    /// The new job's id, or the id of the job holding the key.
    pub fn id(self) -> JobId {
        match self {
            Self::New(id) | Self::Duplicate { existing: id } => id,
        }
    }

    /// Whether it was a duplicate.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Self::Duplicate { .. })
    }
}

impl From<Published> for Enqueued {
    fn from(published: Published) -> Self {
        match published {
            Published::Duplicate(existing) => Self::Duplicate { existing },
            Published::New(id) => Self::New(id),
        }
    }
}
