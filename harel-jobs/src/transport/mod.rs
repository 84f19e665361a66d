//! The per-group PostgreSQL transport: publish, claim, settle, extend.
//!
//! Messages are FIFO within a *group* (an execution id). A claim leases a whole group, so
//! one group has at most one consumer at a time, while different groups are claimed in
//! parallel by any number of workers (`FOR NO KEY UPDATE SKIP LOCKED` on the group row).
//! Every operation is one round trip to a PL/pgSQL function of the queue's schema
//! (`harel_publish`, `harel_claim`, `harel_settle`, `harel_extend`); the batch
//! forms are the same round trip with more elements.
//!
//! This is the layer under [`Worker`](crate::Worker) and [`Job`](crate::Job); use it
//! directly to move raw JSON messages.
//!
//! ```no_run
//! use std::time::Duration;
//! use harel_jobs::transport::{ClaimRequest, OutgoingMessage, Transport};
//!
//! # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let transport = Transport::default();
//! let mut tx = pool.begin().await?;
//! transport.publish(&mut *tx, &OutgoingMessage::new("order-7", "ship", r#"{"id":7}"#)).await?;
//! tx.commit().await?; // visible to claimers from here on
//!
//! if let Some(message) = transport.claim(&pool, &ClaimRequest::new(Duration::from_secs(30))).await? {
//!     // … do the work …
//!     let outcome = transport.ack(&pool, &message.lease).await?;
//!     assert!(outcome.is_applied(), "lease lost: another worker may have run it");
//! }
//! # Ok(()) }
//! ```

mod lease;
mod message;
mod settlement;

use std::collections::HashSet;
use std::time::Duration;

use sqlx::PgExecutor;
use uuid::Uuid;

pub use lease::{ClaimedMessage, Lease, LeaseOutcome, LeaseStatus, LeaseToken};
pub(crate) use message::validate_batch;
pub use message::{OutgoingMessage, StartAt};

/// The old name of [`StartAt`]: a message's start time, not a periodic schedule.
#[deprecated(since = "0.2.0", note = "renamed to StartAt")]
pub type Schedule = StartAt;

pub use crate::vocabulary::{
    DEFAULT_QUEUE, MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, MAX_DELAY, MAX_ERROR_BYTES,
    MAX_GROUP_BYTES, MAX_KIND_BYTES, MAX_PAYLOAD_BYTES, MAX_QUEUE_NAME_LEN,
    MAX_TRACE_CONTEXT_BYTES, MAX_UNIQUE_KEY_BYTES, Priority, own_group,
};
use crate::vocabulary::{JobId, delay_millis};

/// What a publish did with one message ([`Transport::publish_many_outcomes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Published {
    /// Queued, with this id.
    New(JobId),
    /// Not queued: its unique key is held by the job with this id.
    Duplicate(JobId),
}

impl Published {
    /// The id of the new job, or of the one holding the key.
    pub fn id(self) -> JobId {
        match self {
            Self::New(id) | Self::Duplicate(id) => id,
        }
    }

    /// The old name of [`id`](Self::id), as a number.
    #[deprecated(since = "0.2.0", note = "renamed to id")]
    pub fn seq(self) -> i64 {
        self.id().get()
    }
}
pub use settlement::{Receipt, Settlement, storable_error};

use crate::dependency::{OnParentFailure, Parent};
use crate::error::{PublishError, TransportError};
use crate::schema::Schema;
pub use crate::store::PreparedStatements;
use crate::store::{Claim, LeaseColumns, Publish, Settle, Store};

/// What a claim asks for.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// The fencing token the leases will carry.
    pub token: LeaseToken,
    /// How long the leases last unless extended (database clock).
    pub lease: Duration,
    /// Take no group whose priority is below this.
    pub min_priority: Priority,
    /// How many groups to lease at most (one head message each).
    pub limit: u32,
    /// The queue to claim from (`None`: [`DEFAULT_QUEUE`]).
    pub queue: Option<String>,
    /// How long the claim may wait on the server for the claims of a queue with a
    /// concurrency or rate limit that run before it (they take turns); past it the claim
    /// returns nothing. `None`: 10 seconds. Set it below the time the caller itself waits
    /// for the answer, so that a claim the caller gave up on never leases anything later.
    pub max_wait: Option<Duration>,
}

impl ClaimRequest {
    /// One group, a fresh token, any priority.
    pub fn new(lease: Duration) -> Self {
        Self {
            token: LeaseToken::new(),
            lease,
            min_priority: Priority::LOWEST,
            limit: 1,
            queue: None,
            max_wait: None,
        }
    }

    /// Sets how long the claim may wait for the claims of a limited queue before it (see
    /// [`max_wait`](Self::max_wait)).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Sets the queue to claim from.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        let queue = queue.into();
        self.queue = (queue != DEFAULT_QUEUE).then_some(queue);
        self
    }

    /// Sets the most groups to lease.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Sets the priority floor.
    pub fn min_priority(mut self, min_priority: Priority) -> Self {
        self.min_priority = min_priority;
        self
    }

    /// Sets the token.
    pub fn token(mut self, token: LeaseToken) -> Self {
        self.token = token;
        self
    }
}

/// The transport of one schema. Cheap to clone; holds no connection: every operation takes
/// an executor (a pool, a connection, or an open transaction).
#[derive(Clone, Debug)]
pub struct Transport {
    store: Store,
    /// Recorded with the attempts its settles end (see [`worker_id`](Self::worker_id)).
    worker: Option<Uuid>,
}

impl Default for Transport {
    fn default() -> Self {
        Self::new(Schema::default())
    }
}

impl Transport {
    /// The transport of the queue in `schema` (see [`migrate_schema`](crate::migrate_schema)).
    pub fn new(schema: Schema) -> Self {
        Self::on(Store::new(schema, PreparedStatements::default()))
    }

    /// The transport over `store` (sharing its rendered statements and its policy).
    /// The data layer this transport's statements go through (its schema, its policy).
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn on(store: Store) -> Self {
        Self {
            store,
            worker: None,
        }
    }

    /// Records `id` as the worker of the attempts this transport's settles end (the job's
    /// attempt history, [`Client::job_attempts`](crate::Client::job_attempts)); the
    /// embedded pool sets its own id ([`WorkerInfo::id`](crate::WorkerInfo::id)).
    pub fn worker_id(mut self, id: Uuid) -> Self {
        self.worker = Some(id);
        self
    }

    /// Sends its statements as `statements` says (default
    /// [`PreparedStatements::Cached`]); [`PreparedStatements::Unnamed`] behind a transaction
    /// pooler that does not track prepared statements.
    pub fn prepared_statements(mut self, statements: PreparedStatements) -> Self {
        self.store = self.store.with_prepared(statements);
        self
    }

    /// The schema it works in.
    pub fn schema(&self) -> &Schema {
        self.store.schema()
    }

    /// Appends a message to its group, creating the group if it has no messages.
    ///
    /// Runs on whatever executor it is given: inside the caller's transaction, the message
    /// exists if and only if that transaction commits. Publishing into a group that is
    /// leased or parked leaves its lease and its priority alone. Idle workers are woken by a
    /// `NOTIFY` sent on commit. Returns the job's id.
    ///
    /// # Errors
    /// [`PublishError::Invalid`] for a message [`OutgoingMessage::validate`] refuses (nothing
    /// is sent), [`PublishError::Database`] if the write fails.
    pub async fn publish<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        message: &OutgoingMessage,
    ) -> Result<JobId, PublishError> {
        let ids = self
            .publish_many(executor, std::slice::from_ref(message))
            .await?;
        ids.into_iter().next().ok_or_else(|| {
            PublishError::Database(crate::error::DatabaseError::new(sqlx::Error::RowNotFound))
        })
    }

    /// Publishes many messages in one round trip, in order: messages of one group keep
    /// their order in the slice. All are validated first; one invalid message and none is
    /// written. Returns the jobs' ids in the slice's order (for a unique message
    /// whose key was held, the holder's: see [`publish_many_outcomes`](Self::publish_many_outcomes)).
    ///
    /// # Errors
    /// As [`publish`](Self::publish); also [`PublishError::Invalid`] for a batch of more than
    /// [`MAX_BATCH_MESSAGES`] messages or [`MAX_BATCH_BYTES`] (nothing is sent).
    pub async fn publish_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        messages: &[OutgoingMessage],
    ) -> Result<Vec<JobId>, PublishError> {
        let outcomes = self.publish_many_outcomes(executor, messages).await?;
        Ok(outcomes.into_iter().map(Published::id).collect())
    }

    /// [`publish_many`](Self::publish_many), saying for each message whether it was queued
    /// or is a duplicate of a queued unique message ([`OutgoingMessage::unique`]).
    ///
    /// # Errors
    /// As [`publish_many`](Self::publish_many).
    pub async fn publish_many_outcomes<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        messages: &[OutgoingMessage],
    ) -> Result<Vec<Published>, PublishError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        self.publish_outcomes_in(executor, messages, None).await
    }

    /// [`publish_many_outcomes`](Self::publish_many_outcomes) for the messages of a
    /// [`JobBatch`](crate::JobBatch) numbered `batch` (whose messages may wait for earlier
    /// ones of it).
    pub(crate) async fn publish_outcomes_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        messages: &[OutgoingMessage],
        batch: Option<u64>,
    ) -> Result<Vec<Published>, PublishError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        message::validate_batch(messages, batch)?;
        let n = messages.len();
        let batch = publish_columns(messages)?;
        let seqs = self.store.jobs_publish(executor, batch).await?;
        if seqs.len() != n {
            return Err(PublishError::Database(crate::error::DatabaseError::new(
                sqlx::Error::RowNotFound,
            )));
        }
        // harel_publish answers a duplicate with the holder's seq negated
        Ok(seqs
            .into_iter()
            .map(|seq| {
                if seq < 0 {
                    Published::Duplicate(JobId::new(-seq))
                } else {
                    Published::New(JobId::new(seq))
                }
            })
            .collect())
    }

    /// Leases one group and returns its head message, or `None` when nothing is claimable
    /// at or above the request's priority floor. One round trip.
    ///
    /// # Errors
    /// [`TransportError::InvalidArgument`] for a zero lease, [`TransportError::Database`].
    pub async fn claim<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        request: &ClaimRequest,
    ) -> Result<Option<ClaimedMessage>, TransportError> {
        let request = ClaimRequest {
            limit: 1,
            ..request.clone()
        };
        Ok(self
            .claim_many(executor, &request)
            .await?
            .into_iter()
            .next())
    }

    /// Leases up to `request.limit` different groups and returns the head message of each,
    /// highest priority first, then the group that has waited longest. One round trip.
    ///
    /// # Errors
    /// As [`claim`](Self::claim); also a zero limit.
    pub async fn claim_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        request: &ClaimRequest,
    ) -> Result<Vec<ClaimedMessage>, TransportError> {
        self.claim_many_hinted(executor, request, None).await
    }

    /// [`claim_many`](Self::claim_many), also looking from `hint` on: the position a
    /// publisher's `NOTIFY` carried (microseconds since the epoch), of a group it created
    /// that a claim floor may have passed before it committed (see `harel_claim`).
    pub(crate) async fn claim_many_hinted<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        request: &ClaimRequest,
        hint: Option<i64>,
    ) -> Result<Vec<ClaimedMessage>, TransportError> {
        if request.limit == 0 {
            return Err(TransportError::InvalidArgument(
                "claim limit must be at least 1",
            ));
        }
        let lease_ms = lease_millis(request.lease)?;
        let claim = Claim {
            token: request.token.as_uuid(),
            lease_ms,
            limit: i32::try_from(request.limit).unwrap_or(i32::MAX),
            min_priority: i32::from(request.min_priority.get()),
            hint,
            queue: request.queue.as_deref().unwrap_or(DEFAULT_QUEUE),
            max_wait_ms: request.max_wait.map(|wait| {
                i32::try_from(wait.as_millis())
                    .unwrap_or(i32::MAX)
                    .min(3_600_000)
            }),
        };
        let rows = self.store.jobs_claim(executor, &claim).await?;
        Ok(rows
            .into_iter()
            .map(
                |(group, seq, kind, payload, attempt, priority, enqueued_at, trace_context)| {
                    ClaimedMessage {
                        lease: Lease {
                            group,
                            id: JobId::new(seq),
                            token: request.token,
                        },
                        kind,
                        payload,
                        attempt: attempt.max(1) as u32,
                        priority: Priority::from_db(priority),
                        enqueued_at,
                        trace_context,
                    }
                },
            )
            .collect())
    }

    /// Completes a leased message: deletes it and moves its group on (claimable at once if
    /// it has more messages, deleted once drained). One round trip; fenced on the lease.
    ///
    /// # Errors
    /// [`TransportError::Database`]. A lost lease is an outcome, not an error.
    pub async fn ack<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: &Lease,
    ) -> Result<LeaseOutcome, TransportError> {
        self.settle(executor, lease, Settlement::Ack).await
    }

    /// Acks many leased messages in one round trip; one outcome per lease, in order.
    ///
    /// # Errors
    /// As [`settle_many`](Self::settle_many).
    pub async fn ack_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        leases: &[Lease],
    ) -> Result<Vec<LeaseOutcome>, TransportError> {
        let settlements: Vec<(Lease, Settlement)> = leases
            .iter()
            .map(|lease| (lease.clone(), Settlement::Ack))
            .collect();
        self.settle_many(executor, &settlements, None).await
    }

    /// Moves a leased message to the dead-letter table with `error`, and its group on.
    ///
    /// # Errors
    /// As [`settle_many`](Self::settle_many).
    pub async fn dead_letter<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: &Lease,
        error: &str,
    ) -> Result<LeaseOutcome, TransportError> {
        self.settle(executor, lease, Settlement::dead_letter(error))
            .await
    }

    /// Settles one leased message (see [`Settlement`]). One round trip.
    ///
    /// # Errors
    /// As [`settle_many`](Self::settle_many).
    pub async fn settle<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: &Lease,
        settlement: Settlement,
    ) -> Result<LeaseOutcome, TransportError> {
        let outcomes = self
            .settle_many(executor, &[(lease.clone(), settlement)], None)
            .await?;
        outcomes
            .into_iter()
            .next()
            .ok_or(TransportError::UnexpectedReply)
    }

    /// Settles many leased messages, any mix of acks, dead letters and releases, in one
    /// round trip through `harel_settle`; one outcome per settlement, in order.
    ///
    /// Each write is fenced on its lease: it applies only while the group is still leased
    /// to that token at that message, and applying it ends the lease, so the same batch
    /// sent again changes nothing. With a [`Receipt`], such a resend also reports
    /// [`LeaseOutcome::AlreadyApplied`] for what the first send applied (without one, it
    /// reports [`LeaseOutcome::LeaseLost`]). Error texts are stored as
    /// [`storable_error`] makes them.
    ///
    /// # Errors
    /// [`TransportError::InvalidArgument`] for one lease named twice (a stale and the
    /// current lease of one message are two leases) or a delay over 100
    /// years (nothing is sent), [`TransportError::Database`],
    /// [`TransportError::UnexpectedReply`].
    pub async fn settle_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        settlements: &[(Lease, Settlement)],
        receipt: Option<&Receipt>,
    ) -> Result<Vec<LeaseOutcome>, TransportError> {
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        let n = settlements.len();
        let mut seen = HashSet::with_capacity(n);
        let leases = lease_columns(settlements.iter().map(|(lease, _)| lease));
        let mut settle = Settle {
            actions: Vec::with_capacity(n),
            delays: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            count_attempts: Vec::with_capacity(n),
            attempts: Vec::with_capacity(n),
            receipt: receipt.map(|r| r.id),
            forget: receipt.and_then(|r| r.forget),
            worker: self.worker,
        };
        for (lease, settlement) in settlements {
            if !seen.insert(lease) {
                return Err(TransportError::InvalidArgument(
                    "a batch may settle each lease once",
                ));
            }
            settle.actions.push(settlement.action());
            settle.errors.push(settlement.error());
            let (delay, count, made) = match settlement {
                Settlement::Ack => (None, None, None),
                Settlement::Retain { keep } => {
                    let millis = delay_millis(*keep).map_err(|_| {
                        TransportError::InvalidArgument("retention is over 100 years")
                    })?;
                    (Some(millis), None, None)
                }
                Settlement::DeadLetter { attempts, .. } => (
                    None,
                    None,
                    attempts.map(|a| i32::try_from(a).unwrap_or(i32::MAX)),
                ),
                Settlement::Release {
                    delay,
                    count_attempt,
                    ..
                } => {
                    let millis = delay_millis(*delay).map_err(|_| {
                        TransportError::InvalidArgument("release delay is over 100 years")
                    })?;
                    (Some(millis), Some(*count_attempt), None)
                }
            };
            settle.delays.push(delay);
            settle.count_attempts.push(count);
            settle.attempts.push(made);
        }
        let rows = self
            .store
            .leases_settle_if_held(executor, &leases, settle)
            .await?;
        in_input_order(leases.seqs(), rows, |outcome| match outcome.as_str() {
            "applied" => Some(LeaseOutcome::Applied),
            "replayed" => Some(LeaseOutcome::AlreadyApplied),
            "lost" => Some(LeaseOutcome::LeaseLost),
            "cancelled" => Some(LeaseOutcome::Cancelled),
            _ => None,
        })
    }

    /// The heartbeat: pushes a lease's end to now + `lease` (database clock).
    ///
    /// It never waits for a row lock: a lease whose group row another transaction holds at
    /// that moment (mostly the completer settling that very job) is reported held, as the
    /// row says, but is not extended by this call; the next beat extends it.
    ///
    /// # Errors
    /// As [`ack`](Self::ack); [`TransportError::InvalidArgument`] for a zero lease.
    pub async fn extend<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: &Lease,
        duration: Duration,
    ) -> Result<LeaseOutcome, TransportError> {
        let lost = self
            .extend_many(executor, std::slice::from_ref(lease), duration)
            .await?;
        Ok(LeaseOutcome::from_applied(lost.is_empty()))
    }

    /// Extends many leases in one round trip. Returns the ones that were lost.
    ///
    /// # Errors
    /// As [`extend`](Self::extend).
    pub async fn extend_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        leases: &[Lease],
        duration: Duration,
    ) -> Result<Vec<Lease>, TransportError> {
        let statuses = self.heartbeat(executor, leases, duration).await?;
        Ok(leases
            .iter()
            .zip(statuses)
            .filter(|(_, status)| *status == LeaseStatus::Lost)
            .map(|(lease, _)| lease.clone())
            .collect())
    }

    /// Extends many leases in one round trip, as [`extend_many`](Self::extend_many), and
    /// says for each, in order, whether it is still held and whether its job's cancel was
    /// asked for.
    ///
    /// # Errors
    /// As [`extend`](Self::extend).
    pub async fn heartbeat<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        leases: &[Lease],
        duration: Duration,
    ) -> Result<Vec<LeaseStatus>, TransportError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let lease_ms = lease_millis(duration)?;
        let columns = lease_columns(leases.iter());
        let rows = self
            .store
            .leases_extend_if_held(executor, &columns, lease_ms)
            .await?;
        let rows = rows
            .into_iter()
            .map(|(seq, extended, cancel)| (seq, (extended, cancel)))
            .collect();
        in_input_order(columns.seqs(), rows, |(extended, cancel)| {
            Some(match (extended, cancel) {
                (false, _) => LeaseStatus::Lost,
                (true, false) => LeaseStatus::Held,
                (true, true) => LeaseStatus::CancelRequested,
            })
        })
    }
}

/// A lease length in milliseconds: at least 1 ms, at most a year.
fn lease_millis(lease: Duration) -> Result<i64, TransportError> {
    const YEAR_MS: u128 = 365 * 24 * 3600 * 1000;
    let millis = lease.as_millis();
    if millis == 0 || millis > YEAR_MS {
        return Err(TransportError::InvalidArgument(
            "lease must be between 1 ms and one year",
        ));
    }
    Ok(millis as i64)
}

/// The lease columns of a fenced write, one element per lease, in order.
fn lease_columns<'a>(leases: impl ExactSizeIterator<Item = &'a Lease>) -> LeaseColumns<'a> {
    let mut columns = LeaseColumns::with_capacity(leases.len());
    for lease in leases {
        columns.push(&lease.group, lease.id.get(), lease.token.as_uuid());
    }
    columns
}

/// A fenced write's `(seq, result)` rows as one value per input: the functions return one
/// row per input, in input order. Anything else (a row missing, a seq out of place, a
/// result this release does not know) is an error, never a guess: a stale lease and the
/// current lease of one message share their seq.
fn in_input_order<R, T>(
    seqs: &[i64],
    rows: Vec<(i64, R)>,
    parse: impl Fn(R) -> Option<T>,
) -> Result<Vec<T>, TransportError> {
    if rows.len() != seqs.len() || rows.iter().zip(seqs).any(|((s, _), seq)| s != seq) {
        return Err(TransportError::UnexpectedReply);
    }
    rows.into_iter()
        .map(|(_, result)| parse(result).ok_or(TransportError::UnexpectedReply))
        .collect()
}

/// `harel_publish`'s columns for `messages` (each checked), one element per message; the
/// optional columns NULL unless some message has a value.
///
/// # Errors
/// The first invalid message's [`InvalidMessage`](crate::InvalidMessage), or
/// [`PublishError::UnknownParent`] for a parent id no job can have.
pub(crate) fn publish_columns(messages: &[OutgoingMessage]) -> Result<Publish<'_>, PublishError> {
    let n = messages.len();
    // NULL columns unless some message is unique, names a queue or carries a trace
    // context (no feature: none does): the common publish binds nothing more
    let any_unique = messages.iter().any(|m| m.unique.is_some());
    let any_queue = messages.iter().any(|m| m.queue.is_some());
    let any_trace = messages.iter().any(|m| m.trace_context.is_some());
    let any_fair = messages.iter().any(|m| m.fair_key.is_some());
    let mut batch = Publish {
        groups: Vec::with_capacity(n),
        kinds: Vec::with_capacity(n),
        payloads: Vec::with_capacity(n),
        priorities: Vec::with_capacity(n),
        not_before: Vec::with_capacity(n),
        delays: Vec::with_capacity(n),
        unique_keys: any_unique.then(|| Vec::with_capacity(n)),
        unique_holds: any_unique.then(|| Vec::with_capacity(n)),
        queues: any_queue.then(|| Vec::with_capacity(n)),
        trace_contexts: any_trace.then(|| Vec::with_capacity(n)),
        fair_keys: any_fair.then(|| Vec::with_capacity(n)),
        ..Publish::default()
    };
    if messages.iter().any(|m| !m.after.is_empty()) {
        let (after_of, after) = dependency_columns(messages)?;
        batch.after_of = Some(after_of);
        batch.after = Some(after);
        batch.run_after_failure = Some(
            messages
                .iter()
                .map(|m| m.on_parent_failure == OnParentFailure::Run)
                .collect(),
        );
    }
    for message in messages {
        message.validate()?;
        if let (Some(keys), Some(holds)) = (&mut batch.unique_keys, &mut batch.unique_holds) {
            let (key, hold) = match &message.unique {
                Some((key, hold)) => (Some(key.as_str()), *hold),
                None => (None, None),
            };
            keys.push(key);
            holds.push(hold.map(delay_millis).transpose()?);
        }
        if let Some(queues) = &mut batch.queues {
            queues.push(message.queue.as_deref());
        }
        if let Some(traces) = &mut batch.trace_contexts {
            traces.push(message.trace_context.as_deref());
        }
        if let Some(keys) = &mut batch.fair_keys {
            keys.push(message.fair_key.as_deref());
        }
        batch.groups.push(message.group.as_deref());
        batch.kinds.push(message.kind.as_str());
        batch.payloads.push(message.payload.as_str());
        batch.priorities.push(i16::from(message.priority.get()));
        let (not_before, delay) = match message.start_at {
            StartAt::Now => (None, None),
            StartAt::After(delay) => (None, Some(delay_millis(delay)?)),
            StartAt::At(at) => (Some(at), None),
        };
        batch.not_before.push(not_before);
        batch.delays.push(delay);
    }
    Ok(batch)
}

/// `harel_publish`'s dependency columns: per dependency, the waiting message's position
/// (from 1) and its parent: a job id, or minus the position of an earlier message of the
/// call.
///
/// # Errors
/// [`PublishError::UnknownParent`] for a job id no job can have (0 or negative).
fn dependency_columns(messages: &[OutgoingMessage]) -> Result<(Vec<i32>, Vec<i64>), PublishError> {
    let mut after_of = Vec::new();
    let mut after = Vec::new();
    for (position, message) in (1_i32..).zip(messages) {
        for parent in &message.after {
            after_of.push(position);
            after.push(match *parent {
                Parent::Job(id) if id.get() > 0 => id.get(),
                Parent::Job(id) => return Err(PublishError::UnknownParent { parent: id }),
                // (validate_batch checked it names an earlier message)
                Parent::InBatch(job) => -(i64::try_from(job.index).unwrap_or(i64::MAX) + 1),
            });
        }
    }
    Ok((after_of, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_bounds() {
        assert!(lease_millis(Duration::ZERO).is_err());
        assert!(lease_millis(Duration::from_micros(999)).is_err());
        assert_eq!(lease_millis(Duration::from_secs(30)).unwrap(), 30_000);
        assert!(lease_millis(Duration::from_secs(400 * 24 * 3600)).is_err());
    }

    #[test]
    fn rows_must_match_the_input_exactly() {
        let parse = |applied: bool| Some(LeaseOutcome::from_applied(applied));
        let outcomes = in_input_order(&[3, 1, 2], vec![(3, true), (1, false), (2, true)], parse);
        assert_eq!(
            outcomes.unwrap(),
            [
                LeaseOutcome::Applied,
                LeaseOutcome::LeaseLost,
                LeaseOutcome::Applied
            ]
        );
        for rows in [vec![(1, true)], vec![(1, true), (3, true)], vec![]] {
            assert!(matches!(
                in_input_order(&[3, 1], rows, parse),
                Err(TransportError::UnexpectedReply)
            ));
        }
        assert!(in_input_order(&[1], vec![(1, "maybe")], |_| None::<bool>).is_err());
    }
}
