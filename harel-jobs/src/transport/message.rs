//! Messages on their way in: validation and scheduling.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{InvalidMessage, InvalidPriority};

/// The longest group id accepted, in bytes (it is indexed; PostgreSQL's B-tree entries are
/// limited to about 2.7 kB).
pub const MAX_GROUP_BYTES: usize = 1024;
/// The longest job kind accepted, in bytes.
pub const MAX_KIND_BYTES: usize = 255;
/// The longest unique key accepted, in bytes (it is indexed).
pub const MAX_UNIQUE_KEY_BYTES: usize = 1024;
/// The largest payload accepted, in bytes of JSON text (4 MiB). Queues carry references to
/// large data, not the data.
pub const MAX_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

/// The most messages one batch may hold: 100,000. Applies to
/// [`Transport::publish_many`](super::Transport::publish_many), `JobBatch::enqueue` and the
/// `enqueue_many` of `#[job]` types; split larger batches (each batch is one statement,
/// assembled in memory on both sides).
pub const MAX_BATCH_MESSAGES: usize = 100_000;
/// The most bytes one batch may carry, counting every message's payload, group id and kind:
/// 64 MiB (16 payloads of the largest size). The batch is bound as arrays of one statement,
/// which the driver and the server each hold in memory, several times over, until it is
/// written: a 1 GiB batch takes gigabytes of memory and ends in a reset connection. Split
/// larger batches.
pub const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// The queue a job goes to unless it names another: every job before named queues
/// existed, and the queue a worker pool serves unless it names its queues.
pub const DEFAULT_QUEUE: &str = "default";
/// The longest trace context accepted, in bytes: a W3C `traceparent` (55 characters), and
/// a line feed and `tracestate` if the trace has one
/// ([`OutgoingMessage::trace_context`]).
pub const MAX_TRACE_CONTEXT_BYTES: usize = 1024;
/// The longest queue name accepted, in characters.
pub const MAX_QUEUE_NAME_LEN: usize = 64;
/// The queue-name rule, as errors state it.
pub(crate) const QUEUE_NAME_RULE: &str =
    "queue names are 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'";

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
        if value <= 4 {
            Ok(Self(value))
        } else {
            Err(InvalidPriority(value))
        }
    }

    /// Its value, 0 to 4.
    pub const fn get(self) -> u8 {
        self.0
    }

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

/// When a message may start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// As soon as a worker is free.
    #[default]
    Now,
    /// After this long, measured on the database's clock from the publishing transaction:
    /// what `delay` sets.
    After(Duration),
    /// Not before this time (the caller's clock, compared with the database's): what
    /// `not_before` sets.
    At(DateTime<Utc>),
}

/// A message to publish: a group, a job kind, a JSON payload, a priority and a schedule.
///
/// ```
/// use harel_jobs::transport::OutgoingMessage;
/// use harel_jobs::Priority;
/// use std::time::Duration;
///
/// let message = OutgoingMessage::new("user-42", "send_welcome_email", r#"{"user_id":42}"#)
///     .priority(Priority::HIGHEST)
///     .delay(Duration::from_secs(60));
/// assert!(message.validate().is_ok());
/// assert!(OutgoingMessage::new("", "k", "{}").validate().is_err());
/// ```
#[derive(Clone, Debug)]
pub struct OutgoingMessage {
    /// `None`: a group of its own, named by `harel_publish` after the message's seq.
    pub(crate) group: Option<String>,
    pub(crate) kind: String,
    pub(crate) payload: String,
    pub(crate) priority: Priority,
    pub(crate) schedule: Schedule,
    /// The payload came from `serde_json` and needs no second parse.
    pub(crate) payload_is_json: bool,
    /// The unique key and how long it is held after completion (`harel_take_key`).
    pub(crate) unique: Option<(String, Option<Duration>)>,
    /// The named queue (`None`: [`DEFAULT_QUEUE`]).
    pub(crate) queue: Option<String>,
    /// The enqueuing span's trace context (`None`: nothing stored).
    pub(crate) trace_context: Option<String>,
}

impl OutgoingMessage {
    /// A message with a raw JSON payload, due now, at the default priority. The payload is
    /// checked to be one JSON value when published.
    pub fn new(
        group: impl Into<String>,
        kind: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            group: Some(group.into()),
            kind: kind.into(),
            payload: payload.into(),
            priority: Priority::default(),
            schedule: Schedule::Now,
            payload_is_json: false,
            unique: None,
            queue: None,
            trace_context: None,
        }
    }

    /// A message whose payload is `value` serialised with `serde_json`.
    ///
    /// # Errors
    /// The serialiser's error (a map with non-string keys, a failing `Serialize` impl, …).
    pub fn serialize<T: Serialize + ?Sized>(
        group: impl Into<String>,
        kind: impl Into<String>,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        let payload = serde_json::to_string(value)?;
        Ok(Self {
            payload_is_json: true,
            ..Self::new(group, kind, payload)
        })
    }

    /// Sets the priority (used if this message creates its group).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Lets the message start only after `delay` (database clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.schedule = Schedule::After(delay);
        self
    }

    /// Lets the message start only at or after `time` (compared with the database's clock).
    pub fn not_before(mut self, time: DateTime<Utc>) -> Self {
        self.schedule = Schedule::At(time);
        self
    }

    /// Replaces the schedule.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// Makes the message unique under `key` (1 to [`MAX_UNIQUE_KEY_BYTES`] bytes): it is
    /// published only if no message holding `key` is queued (nor, with `hold`, completed
    /// less than `hold` ago); otherwise [`Transport::publish_many_outcomes`](super::Transport::publish_many_outcomes)
    /// reports it as [`Published::Duplicate`](super::Published::Duplicate) and nothing is
    /// written for it.
    pub fn unique(mut self, key: impl Into<String>, hold: Option<Duration>) -> Self {
        self.unique = Some((key.into(), hold));
        self
    }

    /// Puts the message in the named queue (1 to [`MAX_QUEUE_NAME_LEN`] letters, digits,
    /// `_`, `-`, `.` or `:`), created by the first message into it. A group belongs to the
    /// queue of the message that created it: publishing into an existing group of another
    /// queue fails ([`PublishError::GroupInAnotherQueue`](crate::PublishError::GroupInAnotherQueue)).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        let queue = queue.into();
        self.queue = (queue != DEFAULT_QUEUE).then_some(queue);
        self
    }

    /// Stores a trace context with the message, for the claim to return
    /// ([`ClaimedMessage::trace_context`](super::ClaimedMessage::trace_context)): a W3C
    /// `traceparent` (`00-` and the trace id, span id and flags in lowercase hex), then
    /// optionally a line feed and the `tracestate`; at most [`MAX_TRACE_CONTEXT_BYTES`]. Any
    /// other text makes [`validate`](Self::validate) fail with
    /// [`InvalidMessage::InvalidTraceContext`]. With the `opentelemetry` feature, an
    /// enqueue sets it from the current span by itself.
    pub fn trace_context(mut self, context: impl Into<String>) -> Self {
        self.trace_context = Some(context.into());
        self
    }

    /// The queue's name.
    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or(DEFAULT_QUEUE)
    }

    /// Puts the message in a group of its own, named when it is published after its seq
    /// (`own:` and the seq in 19 digits: [`own_group`]), instead of the group it was made
    /// with. Cheaper than a group id of the caller's: the queue finds the job by its id
    /// through the group's key, with no second index.
    pub fn in_own_group(mut self) -> Self {
        self.group = None;
        self
    }

    /// The group id (`None`: a group of its own, see [`in_own_group`](Self::in_own_group)).
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// The job kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The JSON payload.
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// Checks everything [`publish`](super::Transport::publish) checks, without the database.
    ///
    /// # Errors
    /// The first problem found, as an [`InvalidMessage`].
    pub fn validate(&self) -> Result<(), InvalidMessage> {
        if let Some(group) = &self.group {
            validate_group(group)?;
            if is_own_group(group) {
                return Err(InvalidMessage::ReservedGroup);
            }
        }
        if self.kind.is_empty() || self.kind.len() > MAX_KIND_BYTES || self.kind.contains('\0') {
            return Err(InvalidMessage::InvalidKind {
                max: MAX_KIND_BYTES,
            });
        }
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(InvalidMessage::PayloadTooLarge {
                len: self.payload.len(),
                max: MAX_PAYLOAD_BYTES,
            });
        }
        if !self.payload_is_json {
            serde_json::from_str::<serde::de::IgnoredAny>(&self.payload)
                .map_err(InvalidMessage::PayloadNotJson)?;
        }
        if let Schedule::After(delay) = self.schedule {
            delay_millis(delay)?;
        }
        if let Some(queue) = &self.queue {
            validate_queue_name(queue)?;
        }
        if let Some(context) = &self.trace_context
            && !crate::trace_context::is_valid(context)
        {
            return Err(InvalidMessage::InvalidTraceContext {
                max: MAX_TRACE_CONTEXT_BYTES,
            });
        }
        if let Some((key, hold)) = &self.unique {
            if key.is_empty() || key.len() > MAX_UNIQUE_KEY_BYTES || key.contains('\0') {
                return Err(InvalidMessage::InvalidUniqueKey {
                    max: MAX_UNIQUE_KEY_BYTES,
                });
            }
            if let Some(hold) = hold {
                delay_millis(*hold)?;
            }
        }
        Ok(())
    }
}

/// Checks what a batch adds to the checks of each of its messages: at most
/// [`MAX_BATCH_MESSAGES`] messages, and at most [`MAX_BATCH_BYTES`] of payloads, group ids
/// and kinds.
pub(crate) fn validate_batch(messages: &[OutgoingMessage]) -> Result<(), InvalidMessage> {
    if messages.len() > MAX_BATCH_MESSAGES {
        return Err(InvalidMessage::TooManyMessages {
            count: messages.len(),
            max: MAX_BATCH_MESSAGES,
        });
    }
    let len = messages
        .iter()
        .map(|m| m.payload.len() + m.group.as_ref().map_or(0, String::len) + m.kind.len())
        .sum();
    if len > MAX_BATCH_BYTES {
        return Err(InvalidMessage::BatchTooLarge {
            len,
            max: MAX_BATCH_BYTES,
        });
    }
    Ok(())
}

/// The id of the group of its own that the message with `seq` gets when it is published
/// without a group ([`OutgoingMessage::in_own_group`]): `own:` and the seq in 19 digits, so
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
fn is_own_group(group: &str) -> bool {
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

/// The longest delay the queue accepts: 100 years of 365.25 days (PostgreSQL's intervals
/// hold about 290,000; the functions refuse more than this).
pub const MAX_DELAY: Duration = Duration::from_millis(3_155_760_000_000);

/// A delay in whole milliseconds, rounded up so a delay is never shortened.
pub(crate) fn delay_millis(delay: Duration) -> Result<i64, InvalidMessage> {
    let millis = delay.as_nanos().div_ceil(1_000_000);
    if millis > MAX_DELAY.as_millis() {
        return Err(InvalidMessage::DelayTooLong);
    }
    Ok(millis as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(group: &str, payload: &str) -> OutgoingMessage {
        OutgoingMessage::new(group, "kind", payload)
    }

    #[test]
    fn the_queue_name_rule_states_the_limit() {
        assert!(QUEUE_NAME_RULE.contains(&format!(" {MAX_QUEUE_NAME_LEN} ")));
    }

    #[test]
    fn group_limits() {
        assert!(matches!(
            message("", "{}").validate(),
            Err(InvalidMessage::EmptyGroup)
        ));
        assert!(
            message(&"g".repeat(MAX_GROUP_BYTES), "{}")
                .validate()
                .is_ok()
        );
        assert!(matches!(
            message(&"g".repeat(MAX_GROUP_BYTES + 1), "{}").validate(),
            Err(InvalidMessage::GroupTooLong { len, .. }) if len == MAX_GROUP_BYTES + 1
        ));
        assert!(matches!(
            message("a\0b", "{}").validate(),
            Err(InvalidMessage::NulInGroup)
        ));
        assert!(matches!(
            message(&own_group(42), "{}").validate(),
            Err(InvalidMessage::ReservedGroup)
        ));
        for near in [
            "own:000000000000000004",
            "own:00000000000000000042",
            "own:000000000000000004x",
            "Own:0000000000000000042",
            "user:0000000000000000042",
        ] {
            assert!(message(near, "{}").validate().is_ok(), "{near}");
        }
        assert!(
            message("'; DROP TABLE x; -- \\ % 🦀", "{}")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn payload_must_be_one_json_value() {
        for ok in [
            "{}",
            "[1,2]",
            "\"s\"",
            "3",
            "null",
            " {\"a\": \"\\u0000\"} ",
        ] {
            assert!(message("g", ok).validate().is_ok(), "{ok}");
        }
        for bad in ["", "{", "{} {}", "nope", "{'a': 1}"] {
            assert!(
                matches!(
                    message("g", bad).validate(),
                    Err(InvalidMessage::PayloadNotJson(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn payload_size_limit() {
        let big = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES));
        assert!(matches!(
            message("g", &big).validate(),
            Err(InvalidMessage::PayloadTooLarge { .. })
        ));
    }

    #[test]
    fn kind_limits() {
        for bad in ["", "a\0", &"k".repeat(MAX_KIND_BYTES + 1)] {
            assert!(OutgoingMessage::new("g", bad, "{}").validate().is_err());
        }
    }

    #[test]
    fn delays_round_up_and_are_bounded() {
        assert_eq!(delay_millis(Duration::from_micros(1)).unwrap(), 1);
        assert_eq!(delay_millis(Duration::from_secs(2)).unwrap(), 2000);
        assert!(delay_millis(Duration::from_secs(u64::MAX)).is_err());
    }

    #[test]
    fn batch_limits() {
        let small = vec![message("g", "{}"); MAX_BATCH_MESSAGES];
        assert!(validate_batch(&small).is_ok());
        let mut too_many = small;
        too_many.push(message("g", "{}"));
        assert!(matches!(
            validate_batch(&too_many),
            Err(InvalidMessage::TooManyMessages { count, max: MAX_BATCH_MESSAGES })
                if count == MAX_BATCH_MESSAGES + 1
        ));

        // 16 messages of exactly MAX_BATCH_BYTES / 16 bytes (group "g", kind "kind"), then
        // one byte more
        let payload = "x".repeat(MAX_BATCH_BYTES / 16 - 1 - 4);
        let mut full = vec![message("g", &payload); 16];
        assert!(validate_batch(&full).is_ok());
        full[15] = OutgoingMessage::new("gg", "kind", payload);
        assert!(matches!(
            validate_batch(&full),
            Err(InvalidMessage::BatchTooLarge { len, max: MAX_BATCH_BYTES })
                if len == MAX_BATCH_BYTES + 1
        ));
        assert!(validate_batch(&[]).is_ok());
    }

    #[test]
    fn priority_range() {
        assert_eq!(Priority::new(0).unwrap(), Priority::LOWEST);
        assert_eq!(Priority::new(5), Err(InvalidPriority(5)));
        assert_eq!(Priority::try_from(255), Err(InvalidPriority(255)));
        assert!(serde_json::from_str::<Priority>("7").is_err());
        assert_eq!(serde_json::to_string(&Priority::HIGHEST).unwrap(), "4");
    }
}
