//! The queue's vocabulary: every limit, name rule and validator, the values every layer
//! speaks of ([`Priority`], [`JobId`], [`Count`]), and the errors the validators return.
//!
//! A leaf: it imports nothing of the crate, so that every other module may use it (the
//! error types, the transport, the data layer, the operator API, the worker) without an
//! import running back up. The items are public where they were before, each re-exported
//! from its old path (`harel_jobs::MAX_PAGE`, `harel_jobs::transport::MAX_GROUP_BYTES`, …).
//!
//! The macro crate keeps copies of some of these (a procedural-macro crate can export only
//! macros, so it cannot import them); the workspace's `tests/vocabulary.rs` reads each copy
//! from the macro crate's source and holds it equal to its original.

use std::time::Duration;

use serde::{Deserialize, Serialize};

// --- messages ---------------------------------------------------------------------------

/// The longest group id accepted, in bytes (it is indexed; PostgreSQL's B-tree entries are
/// limited to about 2.7 kB).
pub const MAX_GROUP_BYTES: usize = 1024;
/// The longest job kind accepted, in bytes.
pub const MAX_KIND_BYTES: usize = 255;
/// The longest unique key accepted, in bytes (it is indexed).
pub const MAX_UNIQUE_KEY_BYTES: usize = 1024;
/// The longest fairness key accepted, in bytes (it is indexed with the group's start tag).
pub const MAX_FAIR_KEY_BYTES: usize = 255;
/// The greatest weight of a fairness key (the least is 1, every key's weight unless set).
pub const MAX_FAIR_WEIGHT: u32 = 1000;
/// The largest payload accepted, in bytes of JSON text (4 MiB). Queues carry references to
/// large data, not the data.
pub const MAX_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

/// The most messages one batch may hold: 100,000. Applies to `Transport::publish_many`,
/// `JobBatch::enqueue` and the `enqueue_many` of `#[job]` types; split larger batches (each
/// batch is one statement, assembled in memory on both sides).
pub const MAX_BATCH_MESSAGES: usize = 100_000;

/// The longest name of a workflow, or of one of its tasks, in bytes.
pub const MAX_TASK_NAME_BYTES: usize = 255;

/// The most dependencies (a job and one job it waits for) one enqueue may carry, over all
/// its jobs: a fan-in of this many parents into one job, or fewer into several.
pub const MAX_DEPENDENCIES: usize = 100_000;
/// The most bytes one batch may carry, counting every message's payload, group id and kind:
/// 64 MiB (16 payloads of the largest size). The batch is bound as arrays of one statement,
/// which the driver and the server each hold in memory, several times over, until it is
/// written: a 1 GiB batch takes gigabytes of memory and ends in a reset connection. Split
/// larger batches.
pub const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// The longest trace context accepted, in bytes: a W3C `traceparent` (55 characters), and
/// a line feed and `tracestate` if the trace has one (`OutgoingMessage::trace_context`).
pub const MAX_TRACE_CONTEXT_BYTES: usize = 1024;

/// The longest error text recorded with a message or a dead letter, in bytes. Longer texts
/// are cut at a character boundary and end with `…`.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// The longest delay the queue accepts: 100 years of 365.25 days (PostgreSQL's intervals
/// hold about 290,000; the functions refuse more than this).
pub const MAX_DELAY: Duration = Duration::from_millis(3_155_760_000_000);

// --- durable steps ----------------------------------------------------------------------

/// The longest durable step name accepted, in bytes (`JobContext::step`; at least 1).
pub const MAX_STEP_NAME_BYTES: usize = 255;
/// The largest result one durable step may record, in bytes of JSON text (1 MiB). A step
/// records what later attempts need (an id, a receipt), not the data.
pub const MAX_STEP_RESULT_BYTES: usize = 1024 * 1024;
/// The most durable steps one job may record (1,000). They are read in one round trip at
/// the first step of each attempt.
pub const MAX_STEPS_PER_JOB: usize = 1_000;
/// The most bytes of JSON one job's durable steps may hold in all (8 MiB).
pub const MAX_STEP_BYTES_PER_JOB: usize = 8 * 1024 * 1024;

// --- queues -----------------------------------------------------------------------------

/// The queue a job goes to unless it names another: every job before named queues
/// existed, and the queue a worker pool serves unless it names its queues.
pub const DEFAULT_QUEUE: &str = "default";
/// The longest queue name accepted, in characters.
pub const MAX_QUEUE_NAME_LEN: usize = 64;
/// The queue-name rule, as errors state it.
pub(crate) const QUEUE_NAME_RULE: &str =
    "queue names are 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'";

// --- the operator's listings and cancels ------------------------------------------------

/// How long a cancelled job is kept in the history unless the cancel says otherwise.
pub const DEFAULT_CANCELLED_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest cancel reason, in bytes.
pub const MAX_REASON_BYTES: usize = 8 * 1024;
/// How many jobs one round trip of `Client::cancel_group` cancels at most.
pub(crate) const GROUP_CANCEL_STEP: i32 = 1_000;
/// The most jobs one page of `Client::jobs` holds.
pub const MAX_PAGE: u32 = 1_000;
/// The most bounded reads one page of `Client::jobs` makes (`JobQuery::read_on`): each
/// reads at most 2,000 rows of each place a job can be.
pub const MAX_LIST_READS: u32 = 100;
/// The most schedules a schema holds (a new name past it is refused), and the most one
/// `Client::schedules` page lists.
pub const MAX_SCHEDULES: u32 = 1_000;
/// The most groups one page of `Client::groups` holds.
pub const MAX_GROUP_PAGE: u32 = 1_000;
/// How far `Client::groups` and `Client::group` count each group's jobs: a group with more
/// is reported with `GroupInfo::jobs` = 1,000 and `GroupInfo::jobs_capped` set.
pub const GROUP_JOBS_COUNT_CAP: u32 = 1_000;
/// The most groups `Client::top_groups` returns.
pub const MAX_TOP_GROUPS: u32 = 100;
/// The most minutes `Client::throughput` looks back: a day.
pub const MAX_THROUGHPUT_MINUTES: u32 = 1_440;
/// The most queues `Client::throughput_by_queue` gives a series of their own (the others
/// are folded into one).
pub const MAX_THROUGHPUT_QUEUES: u32 = 100;
/// The most pools one `Client::workers` listing returns.
pub const MAX_WORKERS_LISTED: u32 = 1_000;
/// The most queue names a listing gives of each pool (`WorkerInfo::queues`;
/// `WorkerInfo::queue_count` says how many it serves).
pub const MAX_WORKER_QUEUES_LISTED: u32 = 100;
/// How many pages `Stats::fetch` reads at each end of each table: 64 (512 KiB with
/// 8 KiB pages). A table of at most twice that is counted exactly.
pub(crate) const STATS_WINDOW_PAGES: u32 = 64;

// --- periodic jobs and schemas ----------------------------------------------------------

/// The longest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME_BYTES: usize = 255;
/// How many ticks `MissedTicks::All` enqueues at most.
pub const MAX_CATCH_UP: u32 = 1_000;
/// The most shards a [`Shards`](crate::Shards) may hold: 1,024. Each shard is a queue schema
/// with worker pools of its own (at least four connections each), so a deployment needs
/// far fewer; the cap turns a runaway count (a shard per tenant, a loop gone wrong) into an
/// error at start-up instead of thousands of pools.
pub const MAX_SHARDS: usize = 1_024;
/// The longest schema name accepted, in bytes (`Schema::MAX_NAME_BYTES`): 48. PostgreSQL
/// allows 63, and the NOTIFY channel's name is the schema's with a suffix.
pub(crate) const MAX_SCHEMA_NAME_BYTES: usize = 48;

// --- values -----------------------------------------------------------------------------

/// A group's priority: 0 (lowest) to 4 (highest).
///
/// Claims serve the highest priority first and round-robin among the groups of one
/// priority; a worker may also set a floor below which it takes nothing. A group's priority
/// is the one of the message that created it; messages published into an existing group
/// do not change it.
///
/// ```
/// use harel_jobs::Priority;
/// assert_eq!(Priority::default(), Priority::NORMAL);
/// assert_eq!(Priority::new(4).unwrap(), Priority::HIGHEST);
/// assert!(Priority::new(5).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Priority(u8);

impl Priority {
    /// 0, the lowest.
    pub const LOWEST: Priority = Priority(0);
    /// 2, the default.
    pub const NORMAL: Priority = Priority(2);
    /// 4, the highest.
    pub const HIGHEST: Priority = Priority(4);

    /// A priority from 0 to 4.
    ///
    /// # Errors
    /// [`InvalidPriority`] above 4.
    pub const fn new(value: u8) -> Result<Self, InvalidPriority> {
        if value <= Self::HIGHEST.0 {
            Ok(Self(value))
        } else {
            Err(InvalidPriority(value))
        }
    }

    /// Its value, 0 to 4.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The priority a database row holds (a `smallint`), clamped into range.
    pub(crate) fn from_db(value: i16) -> Self {
        Self(value.clamp(0, 4) as u8)
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self::NORMAL
    }
}

impl TryFrom<u8> for Priority {
    type Error = InvalidPriority;
    fn try_from(value: u8) -> Result<Self, InvalidPriority> {
        Self::new(value)
    }
}

impl From<Priority> for u8 {
    fn from(p: Priority) -> u8 {
        p.0
    }
}

/// The id of an enqueued job: its message's sequence number, unique and increasing in
/// enqueue order. Dead letters keep it.
///
/// Returned by every enqueue; [`new`](Self::new) and [`FromStr`](std::str::FromStr) build
/// one from a number a tool was given (a dead letter's id on a command line, say).
///
/// ```
/// use harel_jobs::JobId;
/// let id: JobId = "42".parse().unwrap();
/// assert_eq!(id, JobId::new(42));
/// assert_eq!(id.get(), 42);
/// assert_eq!(i64::from(id), 42);
/// assert_eq!(id.to_string(), "42");
/// assert!("forty-two".parse::<JobId>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(i64);

impl JobId {
    /// The id with this number. An id no job has is not an error here: operations on it
    /// find nothing.
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The number.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl From<JobId> for i64 {
    fn from(id: JobId) -> i64 {
        id.0
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for JobId {
    type Err = std::num::ParseIntError;

    /// Parses the decimal number [`Display`](std::fmt::Display) writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

/// One figure of [`Stats`](crate::Stats), [`QueueInfo`](crate::QueueInfo) or
/// [`LevelDepth`](crate::LevelDepth): counted, estimated, or a lower bound.
///
/// [`value`](Self::value) is the number in every case; match on the variant, or ask
/// [`is_exact`](Self::is_exact), to know how far to trust it. `Display` writes `12`, `~12`
/// (estimated) or `>=12` (at least).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Count {
    /// Counted: the number of rows, as of the snapshot of the statement that read them.
    Exact(i64),
    /// PostgreSQL's running estimate of the table's live rows (`n_live_tup`), never less
    /// than the rows [`Stats::fetch`](crate::Stats::fetch) counted in the pages it read.
    Estimated(i64),
    /// At least this many: counted in the pages read (or up to a cap), while the rest was
    /// not read.
    AtLeast(i64),
}

impl Count {
    /// The number, whatever its kind.
    pub fn value(self) -> i64 {
        match self {
            Count::Exact(n) | Count::Estimated(n) | Count::AtLeast(n) => n,
        }
    }

    /// Whether it was counted exactly.
    pub fn is_exact(self) -> bool {
        matches!(self, Count::Exact(_))
    }

    /// The number if it was counted exactly, `None` otherwise.
    pub fn exact(self) -> Option<i64> {
        match self {
            Count::Exact(n) => Some(n),
            Count::Estimated(_) | Count::AtLeast(_) => None,
        }
    }
}

impl Count {
    /// The sum of two counts, as sure as the least sure of them: exact if both are, an
    /// estimate if either is, else at least the sum.
    pub(crate) fn plus(self, other: Count) -> Count {
        let sum = self.value().saturating_add(other.value());
        match (self, other) {
            (Count::Exact(_), Count::Exact(_)) => Count::Exact(sum),
            (Count::Estimated(_), _) | (_, Count::Estimated(_)) => Count::Estimated(sum),
            (Count::AtLeast(_), _) | (_, Count::AtLeast(_)) => Count::AtLeast(sum),
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Count::Exact(n) => write!(f, "{n}"),
            Count::Estimated(n) => write!(f, "~{n}"),
            Count::AtLeast(n) => write!(f, ">={n}"),
        }
    }
}

// --- name rules and validators ----------------------------------------------------------

/// The id of the group of its own that the message with `seq` gets when it is published
/// without a group (`OutgoingMessage::in_own_group`): `own:` and the seq in 19 digits, so
/// that these ids sort as their seqs do (`harel_publish` computes the same).
///
/// ```
/// assert_eq!(harel_jobs::transport::own_group(42), "own:0000000000000000042");
/// ```
pub fn own_group(seq: i64) -> String {
    format!("own:{seq:019}")
}

/// Whether `group` has the form [`own_group`] gives: a caller cannot enqueue into such a
/// group (`harel_publish` takes one from a raw call as no group at all), so the database
/// can insert the groups of a batch of jobs without a group knowing that none exists yet.
pub(crate) fn is_own_group(group: &str) -> bool {
    group
        .strip_prefix("own:")
        .is_some_and(|digits| digits.len() == 19 && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks a group id: 1 to [`MAX_GROUP_BYTES`] bytes, no NUL.
pub(crate) fn validate_group(group: &str) -> Result<(), InvalidMessage> {
    if group.is_empty() {
        return Err(InvalidMessage::EmptyGroup);
    }
    if group.len() > MAX_GROUP_BYTES {
        return Err(InvalidMessage::GroupTooLong {
            len: group.len(),
            max: MAX_GROUP_BYTES,
        });
    }
    if group.contains('\0') {
        return Err(InvalidMessage::NulInGroup);
    }
    Ok(())
}

/// Checks a job kind: 1 to [`MAX_KIND_BYTES`] bytes, no NUL.
pub(crate) fn validate_kind(kind: &str) -> Result<(), InvalidMessage> {
    if kind.is_empty() || kind.len() > MAX_KIND_BYTES || kind.contains('\0') {
        return Err(InvalidMessage::InvalidKind {
            max: MAX_KIND_BYTES,
        });
    }
    Ok(())
}

/// Checks a payload's size: at most [`MAX_PAYLOAD_BYTES`] bytes of JSON text.
pub(crate) fn validate_payload_size(len: usize) -> Result<(), InvalidMessage> {
    if len > MAX_PAYLOAD_BYTES {
        return Err(InvalidMessage::PayloadTooLarge {
            len,
            max: MAX_PAYLOAD_BYTES,
        });
    }
    Ok(())
}

/// Checks a unique key: 1 to [`MAX_UNIQUE_KEY_BYTES`] bytes, no NUL.
pub(crate) fn validate_unique_key(key: &str) -> Result<(), InvalidMessage> {
    if key.is_empty() || key.len() > MAX_UNIQUE_KEY_BYTES || key.contains('\0') {
        return Err(InvalidMessage::InvalidUniqueKey {
            max: MAX_UNIQUE_KEY_BYTES,
        });
    }
    Ok(())
}

/// Checks a fairness key: at most [`MAX_FAIR_KEY_BYTES`] bytes, no NUL (the empty key is
/// the one jobs without a key share).
pub(crate) fn validate_fair_key(key: &str) -> Result<(), InvalidMessage> {
    if key.len() > MAX_FAIR_KEY_BYTES || key.contains('\0') {
        return Err(InvalidMessage::InvalidFairKey {
            max: MAX_FAIR_KEY_BYTES,
        });
    }
    Ok(())
}

/// Checks a queue name: 1 to [`MAX_QUEUE_NAME_LEN`] ASCII letters, digits, `_`, `-`, `.`
/// or `:` (the same rule as `harel_ensure_queue`).
pub(crate) fn validate_queue_name(name: &str) -> Result<(), InvalidMessage> {
    let valid = !name.is_empty()
        && name.len() <= MAX_QUEUE_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if valid {
        Ok(())
    } else {
        Err(InvalidMessage::InvalidQueueName {
            max: MAX_QUEUE_NAME_LEN,
        })
    }
}

/// A delay in whole milliseconds, rounded up so a delay is never shortened.
pub(crate) fn delay_millis(delay: Duration) -> Result<i64, InvalidMessage> {
    let millis = delay.as_nanos().div_ceil(1_000_000);
    if millis > MAX_DELAY.as_millis() {
        return Err(InvalidMessage::DelayTooLong);
    }
    Ok(millis as i64)
}

/// Whether `text` has the stored shape of a trace context: a version-00-sized
/// `traceparent` (lowercase hex fields of 2, 32, 16 and 2 digits), then optionally a line
/// feed and a `tracestate` of printable ASCII, at most [`MAX_TRACE_CONTEXT_BYTES`] in all.
/// What `harel_publish` checks.
pub(crate) fn is_trace_context(text: &str) -> bool {
    if text.len() > MAX_TRACE_CONTEXT_BYTES {
        return false;
    }
    let (parent, state) = match text.split_once('\n') {
        Some((parent, state)) => (parent, Some(state)),
        None => (text, None),
    };
    let hex = |field: &str, len: usize| {
        field.len() == len
            && field
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let mut fields = parent.split('-');
    let parent_ok = [2, 32, 16, 2]
        .into_iter()
        .all(|len| fields.next().is_some_and(|field| hex(field, len)))
        && fields.next().is_none();
    parent_ok && state.is_none_or(|state| state.bytes().all(|b| (b' '..=b'~').contains(&b)))
}

/// `name` as an SQL identifier: bare when it can be, else in double quotes (for the
/// statements a message shows a person, such as a missing privilege's `GRANT`).
pub(crate) fn quote_identifier(name: &str) -> String {
    let bare = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'$');
    if bare {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

// --- what the validators return ---------------------------------------------------------

/// A priority outside 0 (lowest) to 4 (highest): the one error of [`Priority::new`], and
/// the reason of [`InvalidMessage::InvalidPriority`] when an enqueue was given one.
///
/// ```
/// use harel_jobs::Priority;
/// let error = Priority::new(7).unwrap_err();
/// assert_eq!(error.value(), 7);
/// assert_eq!(error.to_string(), "priority 7 is out of range: priorities are 0 (lowest) to 4 (highest)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("priority {0} is out of range: priorities are 0 (lowest) to 4 (highest)")]
pub struct InvalidPriority(pub(crate) u8);

impl InvalidPriority {
    /// The value that was refused.
    pub const fn value(self) -> u8 {
        self.0
    }
}

/// A message that a publish (`Transport::publish`, or an enqueue) refused before writing
/// anything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// The group id is the empty string.
    #[error("group id is empty")]
    EmptyGroup,
    /// The group id is longer than [`MAX_GROUP_BYTES`].
    #[error("group id is {len} bytes long, more than the limit of {max}")]
    GroupTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The group id contains a NUL character, which PostgreSQL text cannot store.
    #[error("group id contains a NUL character")]
    NulInGroup,
    /// The group id has the form of a group of its own (`own:` and 19 digits, see
    /// [`own_group`]): those names belong to jobs enqueued without a group.
    #[error("group ids of the form `own:` and 19 digits are reserved for jobs without a group")]
    ReservedGroup,
    /// The job kind is empty, too long, or contains a NUL character.
    #[error("job kind must be 1 to {max} bytes without NUL characters")]
    InvalidKind {
        /// The limit in bytes.
        max: usize,
    },
    /// The serialised payload is larger than [`MAX_PAYLOAD_BYTES`].
    #[error("payload is {len} bytes of JSON, more than the limit of {max}")]
    PayloadTooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The payload is not one JSON value.
    #[error("payload is not a JSON value: {0}")]
    PayloadNotJson(#[source] serde_json::Error),
    /// The priority given to an enqueue (`Enqueue::priority`) is outside 0..=4.
    #[error(transparent)]
    InvalidPriority(#[from] InvalidPriority),
    /// The delay does not fit in PostgreSQL's interval arithmetic (over about 290,000 years).
    #[error("delay is too long")]
    DelayTooLong,
    /// The queue name is empty, too long, or has a character other than ASCII letters,
    /// digits, `_`, `-`, `.` and `:`.
    #[error("{}", QUEUE_NAME_RULE)]
    InvalidQueueName {
        /// The limit in characters.
        max: usize,
    },
    /// The trace context is not a W3C `traceparent` (optionally followed by a line feed and
    /// a `tracestate`), or is longer than [`MAX_TRACE_CONTEXT_BYTES`].
    #[error(
        "a trace context is a W3C traceparent, optionally a line feed and a tracestate, at most {max} bytes"
    )]
    InvalidTraceContext {
        /// The limit in bytes.
        max: usize,
    },
    /// The unique key is empty, too long, or contains a NUL character.
    #[error("unique key must be 1 to {max} bytes without NUL characters")]
    InvalidUniqueKey {
        /// The limit in bytes.
        max: usize,
    },
    /// The fairness key is longer than [`MAX_FAIR_KEY_BYTES`] or contains a NUL character.
    #[error("fairness key must be at most {max} bytes without NUL characters")]
    InvalidFairKey {
        /// The limit in bytes.
        max: usize,
    },
    /// The batch holds more than [`MAX_BATCH_MESSAGES`] messages. Nothing was sent; split
    /// it.
    #[error("batch holds {count} messages, more than the limit of {max}: split it")]
    TooManyMessages {
        /// How many it holds.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The batch's payloads, group ids and kinds add up to more than [`MAX_BATCH_BYTES`].
    /// Nothing was sent; split it.
    #[error(
        "batch is {len} bytes of payloads, group ids and kinds, more than the limit of {max}: split it"
    )]
    BatchTooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A workflow's name is empty, longer than [`MAX_TASK_NAME_BYTES`], or holds a NUL.
    #[error("a workflow's name is 1 to {max} bytes without NUL characters")]
    InvalidWorkflowName {
        /// The limit in bytes.
        max: usize,
    },
    /// A workflow's task name is empty, longer than [`MAX_TASK_NAME_BYTES`], or holds a
    /// NUL.
    #[error("a task's name is 1 to {max} bytes without NUL characters")]
    InvalidTaskName {
        /// The limit in bytes.
        max: usize,
    },
    /// Two tasks of one workflow have this name.
    #[error("the workflow already has a task named {0:?}")]
    DuplicateTaskName(String),
    /// A workflow's task is a unique job: a task is its workflow's own job, never a
    /// duplicate of another.
    #[error("a workflow's task cannot be a unique job")]
    UniqueJobInWorkflow,
    /// A workflow's task waits for a job that is not an earlier task of its workflow.
    #[error("a workflow's task waits only for earlier tasks of its workflow")]
    ParentOutsideWorkflow,
    /// A workflow without a task.
    #[error("a workflow has at least one task")]
    EmptyWorkflow,
    /// A job waits for a job of a batch ([`BatchRef`](crate::BatchRef)) that is not an
    /// earlier job of the batch it is enqueued with (another batch's, or a single enqueue's).
    #[error("a job can wait only for an earlier job of its own batch")]
    ParentNotInBatch,
    /// The jobs of one enqueue wait for more than [`MAX_DEPENDENCIES`] jobs in all.
    #[error("the jobs wait for {count} jobs in all, more than the limit of {max}: split the batch")]
    TooManyDependencies {
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_name_rule_states_the_limit() {
        assert!(QUEUE_NAME_RULE.contains(&format!(" {MAX_QUEUE_NAME_LEN} ")));
    }

    #[test]
    fn delays_round_up_and_are_bounded() {
        assert_eq!(delay_millis(Duration::from_micros(1)).unwrap(), 1);
        assert_eq!(delay_millis(Duration::from_secs(2)).unwrap(), 2000);
        assert!(delay_millis(Duration::from_secs(u64::MAX)).is_err());
    }

    #[test]
    fn priority_range() {
        assert_eq!(Priority::new(0).unwrap(), Priority::LOWEST);
        assert_eq!(Priority::new(5), Err(InvalidPriority(5)));
        assert_eq!(Priority::try_from(255), Err(InvalidPriority(255)));
        assert!(serde_json::from_str::<Priority>("7").is_err());
        assert_eq!(serde_json::to_string(&Priority::HIGHEST).unwrap(), "4");
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_stored_shape_of_a_trace_context() {
        assert_eq!(PARENT.len(), 55);
        assert!(is_trace_context(PARENT));
        assert!(is_trace_context(&format!(
            "{PARENT}\nrojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
        )));
        assert!(is_trace_context(&format!("{PARENT}\n")));
        for bad in [
            "",
            "garbage",
            &PARENT.to_uppercase(),
            &PARENT[..54],
            &format!("{PARENT}-00"),
            &format!("{PARENT}\nstate\nmore"),
            &format!("{PARENT}\nnul\0"),
            &format!("{PARENT}\n{}", "s".repeat(MAX_TRACE_CONTEXT_BYTES)),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert!(!is_trace_context(bad), "{bad:?}");
        }
    }

    #[test]
    fn identifiers_are_quoted_when_they_must_be() {
        assert_eq!(quote_identifier("harel_role_1"), "harel_role_1");
        assert_eq!(quote_identifier("Ops Team"), "\"Ops Team\"");
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn counts_say_what_they_are() {
        assert_eq!(Count::Exact(3).value(), 3);
        assert_eq!(Count::Estimated(4).value(), 4);
        assert_eq!(Count::AtLeast(5).value(), 5);
        assert!(Count::Exact(3).is_exact());
        assert!(!Count::Estimated(3).is_exact());
        assert_eq!(Count::AtLeast(5).exact(), None);
        assert_eq!(Count::Exact(0).exact(), Some(0));
        let shown: Vec<String> = [Count::Exact(1), Count::Estimated(2), Count::AtLeast(3)]
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["1", "~2", ">=3"]);
    }
}
