//! Messages on their way in: validation and start times.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::dependency::{OnParentFailure, Parent};
use crate::vocabulary::{
    DEFAULT_QUEUE, InvalidMessage, MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, MAX_DEPENDENCIES,
    MAX_TRACE_CONTEXT_BYTES, Priority, delay_millis, is_own_group, is_trace_context,
    validate_fair_key, validate_group, validate_kind, validate_payload_size, validate_queue_name,
    validate_unique_key,
};

/// When a message may start: now, after a delay, or at a time. (Not a periodic schedule:
/// those are [`Periodic`](crate::Periodic)'s.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartAt {
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

/// A message to publish: a group, a job kind, a JSON payload, a priority and a start time.
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
    /// `None`: a group of its own, named by `harel_publish` after the job's id.
    pub(crate) group: Option<String>,
    pub(crate) kind: String,
    pub(crate) payload: String,
    pub(crate) priority: Priority,
    pub(crate) start_at: StartAt,
    /// The payload came from `serde_json` and needs no second parse.
    pub(crate) payload_is_json: bool,
    /// The unique key and how long it is held after completion (`harel_take_key`).
    pub(crate) unique: Option<(String, Option<Duration>)>,
    /// The named queue (`None`: [`DEFAULT_QUEUE`]).
    pub(crate) queue: Option<String>,
    /// The enqueuing span's trace context (`None`: nothing stored).
    pub(crate) trace_context: Option<String>,
    /// The fairness key (`None`: the key `""` that jobs without one share).
    pub(crate) fair_key: Option<String>,
    /// The jobs it waits for (ADR 0033).
    pub(crate) after: Vec<Parent>,
    /// What it does when one of them fails.
    pub(crate) on_parent_failure: OnParentFailure,
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
            start_at: StartAt::Now,
            payload_is_json: false,
            unique: None,
            queue: None,
            trace_context: None,
            fair_key: None,
            after: Vec::new(),
            on_parent_failure: OnParentFailure::Cancel,
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
        self.start_at = StartAt::After(delay);
        self
    }

    /// Lets the message start only at or after `time` (compared with the database's clock).
    pub fn not_before(mut self, time: DateTime<Utc>) -> Self {
        self.start_at = StartAt::At(time);
        self
    }

    /// Replaces the start time (what [`delay`](Self::delay) and
    /// [`not_before`](Self::not_before) set).
    pub fn start_at(mut self, start_at: StartAt) -> Self {
        self.start_at = start_at;
        self
    }

    /// The old name of [`start_at`](Self::start_at).
    #[deprecated(since = "0.2.0", note = "renamed to start_at")]
    pub fn schedule(self, start_at: StartAt) -> Self {
        self.start_at(start_at)
    }

    /// Makes the message unique under `key` (1 to [`MAX_UNIQUE_KEY_BYTES`](super::MAX_UNIQUE_KEY_BYTES) bytes): it is
    /// published only if no message holding `key` is queued (nor, with `hold`, completed
    /// less than `hold` ago); otherwise [`Transport::publish_many_outcomes`](super::Transport::publish_many_outcomes)
    /// reports it as [`Published::Duplicate`](super::Published::Duplicate) and nothing is
    /// written for it.
    pub fn unique(mut self, key: impl Into<String>, hold: Option<Duration>) -> Self {
        self.unique = Some((key.into(), hold));
        self
    }

    /// Puts the message in the named queue (1 to [`MAX_QUEUE_NAME_LEN`](super::MAX_QUEUE_NAME_LEN) letters, digits,
    /// `_`, `-`, `.` or `:`), created by the first message into it. A group belongs to the
    /// queue of the message that created it: publishing into an existing group of another
    /// queue fails ([`PublishError::GroupInAnotherQueue`](crate::PublishError::GroupInAnotherQueue)).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        let queue = queue.into();
        self.queue = (queue != DEFAULT_QUEUE).then_some(queue);
        self
    }

    /// Sets the message's fairness key (a tenant, an account, a customer): within a queue
    /// and a priority level, claims share the starts between the keys that have ready work
    /// in proportion to their weights (1 unless an operator set one:
    /// [`Client::set_fair_weight`](crate::Client::set_fair_weight)), however many groups
    /// or jobs each has. At most [`MAX_FAIR_KEY_BYTES`](crate::MAX_FAIR_KEY_BYTES) bytes;
    /// `""`, the default, is the key that messages without one share. A group belongs to
    /// the key of the message that created it (a later message's key is not the group's).
    pub fn fair_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.fair_key = (!key.is_empty()).then_some(key);
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

    /// Makes the message wait for `parents` (added to any set before): it is queued with
    /// its group at once, but not claimed before every parent has completed; when one
    /// ends otherwise (a dead letter, a cancel), it is cancelled, unless
    /// [`on_parent_failure`](Self::on_parent_failure) says [`OnParentFailure::Run`]. Its
    /// start time applies from its release on. A [`Parent::InBatch`] must be an earlier
    /// message of the same [`JobBatch`](crate::JobBatch).
    pub fn after<P: Into<Parent>>(mut self, parents: impl IntoIterator<Item = P>) -> Self {
        self.after.extend(parents.into_iter().map(Into::into));
        self
    }

    /// What the message does when a parent ([`after`](Self::after)) ends without
    /// completing. Default [`OnParentFailure::Cancel`].
    pub fn on_parent_failure(mut self, then: OnParentFailure) -> Self {
        self.on_parent_failure = then;
        self
    }

    /// The jobs it waits for.
    pub fn parents(&self) -> &[Parent] {
        &self.after
    }

    /// The queue's name.
    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or(DEFAULT_QUEUE)
    }

    /// Puts the message in a group of its own, named when it is published after its id
    /// (`own:` and the id in 19 digits: [`own_group`](super::own_group)), instead of the group it was made
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
        validate_kind(&self.kind)?;
        validate_payload_size(self.payload.len())?;
        if !self.payload_is_json {
            serde_json::from_str::<serde::de::IgnoredAny>(&self.payload)
                .map_err(InvalidMessage::PayloadNotJson)?;
        }
        if let StartAt::After(delay) = self.start_at {
            delay_millis(delay)?;
        }
        if let Some(queue) = &self.queue {
            validate_queue_name(queue)?;
        }
        if let Some(key) = &self.fair_key {
            validate_fair_key(key)?;
        }
        if let Some(context) = &self.trace_context
            && !is_trace_context(context)
        {
            return Err(InvalidMessage::InvalidTraceContext {
                max: MAX_TRACE_CONTEXT_BYTES,
            });
        }
        if let Some((key, hold)) = &self.unique {
            validate_unique_key(key)?;
            if let Some(hold) = hold {
                delay_millis(*hold)?;
            }
        }
        Ok(())
    }
}

/// Checks what a batch adds to the checks of each of its messages: at most
/// [`MAX_BATCH_MESSAGES`] messages, at most [`MAX_BATCH_BYTES`] of payloads, group ids
/// and kinds, at most [`MAX_DEPENDENCIES`] dependencies, each reference to a job of the
/// batch naming an earlier one of `batch` (`None`: not a [`JobBatch`](crate::JobBatch),
/// so none may).
pub(crate) fn validate_batch(
    messages: &[OutgoingMessage],
    batch: Option<u64>,
) -> Result<(), InvalidMessage> {
    let dependencies: usize = messages.iter().map(|m| m.after.len()).sum();
    if dependencies > MAX_DEPENDENCIES {
        return Err(InvalidMessage::TooManyDependencies {
            count: dependencies,
            max: MAX_DEPENDENCIES,
        });
    }
    for (position, message) in messages.iter().enumerate() {
        for parent in &message.after {
            if let Parent::InBatch(job) = parent
                && (Some(job.batch) != batch || job.index >= position)
            {
                return Err(InvalidMessage::ParentNotInBatch);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::{MAX_GROUP_BYTES, MAX_KIND_BYTES, MAX_PAYLOAD_BYTES, own_group};

    fn message(group: &str, payload: &str) -> OutgoingMessage {
        OutgoingMessage::new(group, "kind", payload)
    }

    #[test]
    fn start_at_is_what_delay_and_not_before_set() {
        let delay = Duration::from_secs(5);
        assert_eq!(message("g", "{}").start_at, StartAt::Now);
        assert_eq!(
            message("g", "{}").delay(delay).start_at,
            StartAt::After(delay)
        );
        let at = DateTime::<Utc>::UNIX_EPOCH;
        assert_eq!(message("g", "{}").not_before(at).start_at, StartAt::At(at));
        // the old names still compile, and mean the same
        #[allow(deprecated)]
        let old = message("g", "{}").schedule(crate::transport::Schedule::After(delay));
        assert_eq!(old.start_at, StartAt::After(delay));
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
    fn batch_limits() {
        let small = vec![message("g", "{}"); MAX_BATCH_MESSAGES];
        assert!(validate_batch(&small, None).is_ok());
        let mut too_many = small;
        too_many.push(message("g", "{}"));
        assert!(matches!(
            validate_batch(&too_many, None),
            Err(InvalidMessage::TooManyMessages { count, max: MAX_BATCH_MESSAGES })
                if count == MAX_BATCH_MESSAGES + 1
        ));

        // 16 messages of exactly MAX_BATCH_BYTES / 16 bytes (group "g", kind "kind"), then
        // one byte more
        let payload = "x".repeat(MAX_BATCH_BYTES / 16 - 1 - 4);
        let mut full = vec![message("g", &payload); 16];
        assert!(validate_batch(&full, None).is_ok());
        full[15] = OutgoingMessage::new("gg", "kind", payload);
        assert!(matches!(
            validate_batch(&full, None),
            Err(InvalidMessage::BatchTooLarge { len, max: MAX_BATCH_BYTES })
                if len == MAX_BATCH_BYTES + 1
        ));
        assert!(validate_batch(&[], None).is_ok());
    }
}
