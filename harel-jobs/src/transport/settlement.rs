//! How a lease holder ends its hold on a message, and the receipts that make a batch of
//! such writes safe to send twice.

use std::time::Duration;

use uuid::Uuid;

use crate::vocabulary::MAX_ERROR_BYTES;

/// What becomes of a leased message, for [`Transport::settle_many`](super::Transport::settle_many).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// Done: the message is deleted and its group moves on (claimable at once if it has
    /// more messages, gone if it is drained).
    Ack,
    /// Done, as `Ack`, and the job is kept in the queue's history as completed for `keep`
    /// (at most 100 years), where `Client::job` finds it; pruned after that.
    Retain {
        /// How long the completed job is kept.
        keep: Duration,
    },
    /// Failed for good: the message moves to the dead-letter table with `error`, and its
    /// group moves on as for `Ack`.
    DeadLetter {
        /// Recorded as the dead letter's last error (see [`MAX_ERROR_BYTES`]).
        error: String,
        /// The attempts to record, instead of the claims counted: for a job given up on
        /// without running it (its claim found it out of attempts).
        attempts: Option<u32>,
    },
    /// Given back: the message stays its group's head, and the group may be claimed again
    /// after `delay` (zero: at once). While it waits, the group's later messages wait too,
    /// so FIFO holds.
    Release {
        /// How long the group waits (database clock), at most 100 years.
        delay: Duration,
        /// Recorded on the message as its last error.
        error: Option<String>,
        /// `false` gives the claim's attempt back: the job never ran, or it was not a
        /// failure (a snooze).
        count_attempt: bool,
    },
}

impl Settlement {
    /// `DeadLetter` with `error`, recording the claims counted.
    pub fn dead_letter(error: impl Into<String>) -> Self {
        Self::DeadLetter {
            error: error.into(),
            attempts: None,
        }
    }

    /// `Release` at once, attempt counted, no error.
    pub fn release_now() -> Self {
        Self::Release {
            delay: Duration::ZERO,
            error: None,
            count_attempt: true,
        }
    }

    /// The action's name in `harel_settle`.
    pub(super) fn action(&self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Retain { .. } => "retain",
            Self::DeadLetter { .. } => "dead",
            Self::Release { .. } => "release",
        }
    }

    /// The error text, made storable (see [`storable_error`]).
    pub(super) fn error(&self) -> Option<String> {
        match self {
            Self::Ack | Self::Retain { .. } => None,
            Self::DeadLetter { error, .. } => Some(storable_error(error)),
            Self::Release { error, .. } => error.as_deref().map(storable_error),
        }
    }
}

/// `error` as PostgreSQL can store it and as long as we keep it: NUL characters (which
/// `text` cannot hold, and which would fail the whole batch) become U+FFFD, and a text over
/// [`MAX_ERROR_BYTES`] is cut at a character boundary, ending with `…`.
pub fn storable_error(error: &str) -> String {
    let mut text = error.replace('\0', "\u{FFFD}");
    if text.len() > MAX_ERROR_BYTES {
        let ellipsis = '…';
        let mut end = MAX_ERROR_BYTES - ellipsis.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push(ellipsis);
    }
    text
}

/// Makes a batch of settlements safe to send again after its reply was lost.
///
/// A worker cannot know whether a batch whose connection broke mid-call committed. Sent
/// with a receipt, what the batch applied is kept in the database under the receipt's id;
/// the same batch sent again under the same receipt changes nothing and reports
/// [`LeaseOutcome::AlreadyApplied`](super::LeaseOutcome::AlreadyApplied) for what the first
/// call applied. Each new batch takes [`next`](Self::next) of the previous receipt, which
/// also deletes the previous one; so the caller must move on only once it knows the previous
/// batch's outcome (or has given up on it).
///
/// ```
/// use harel_jobs::transport::Receipt;
/// let first = Receipt::new();
/// let second = first.next(); // for the batch after `first`'s reply arrived
/// assert_ne!(first, second);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub(super) id: Uuid,
    pub(super) forget: Option<Uuid>,
}

impl Receipt {
    /// A receipt for a first batch.
    pub fn new() -> Self {
        Self {
            id: Uuid::new_v4(),
            forget: None,
        }
    }

    /// A receipt for the batch after this one; the database drops this one then.
    pub fn next(&self) -> Self {
        Self {
            id: Uuid::new_v4(),
            forget: Some(self.id),
        }
    }
}

impl Default for Receipt {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_lose_nul_and_length() {
        assert_eq!(storable_error("a\0b"), "a\u{FFFD}b");
        assert_eq!(storable_error("plain"), "plain");
        let long = "é".repeat(MAX_ERROR_BYTES);
        let stored = storable_error(&long);
        assert!(stored.len() <= MAX_ERROR_BYTES, "{}", stored.len());
        assert!(stored.ends_with('…'));
        assert!(stored.starts_with("éé"));
    }

    #[test]
    fn receipts_chain() {
        let first = Receipt::new();
        let second = first.next();
        assert_eq!(first.forget, None);
        assert_eq!(second.forget, Some(first.id));
    }
}
