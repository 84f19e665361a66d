//! Leases: the token a claim takes, what it hands back, and how fenced writes end.

use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::message::Priority;

/// The fencing token of one claim. Every write a lease holder makes (ack, nack, extend) is
/// applied only while the group is still leased to this token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(Uuid);

impl LeaseToken {
    /// A fresh random token.
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The token as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for LeaseToken {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken({})", self.0)
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The right to complete one message: its group, its sequence number and the claim's token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The group (execution id).
    pub group: String,
    /// The message's sequence number: unique, increasing in publish order.
    pub seq: i64,
    /// The claim's fencing token.
    pub token: LeaseToken,
}

/// A message handed out by a claim, with its lease.
#[derive(Clone, Debug)]
pub struct ClaimedMessage {
    /// What to pass to ack, nack or extend.
    pub lease: Lease,
    /// The job kind.
    pub kind: String,
    /// The JSON payload.
    pub payload: String,
    /// Which attempt this is, from 1. Counted in the database when the message is claimed,
    /// so an attempt whose worker died counts too.
    pub attempt: u32,
    /// The priority the message was published with.
    pub priority: Priority,
    /// When it was published (database clock).
    pub enqueued_at: DateTime<Utc>,
}

/// The outcome of a fenced write.
#[must_use = "a lost lease means another worker may be running the job"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// The lease was still held: the write happened.
    Applied,
    /// The group is no longer leased to this token at this message (the lease lapsed and
    /// another worker claimed it, or the message was already completed): nothing changed.
    LeaseLost,
}

impl LeaseOutcome {
    /// Whether the write happened.
    pub fn is_applied(self) -> bool {
        self == Self::Applied
    }

    pub(crate) fn from_applied(applied: bool) -> Self {
        if applied {
            Self::Applied
        } else {
            Self::LeaseLost
        }
    }
}

/// How to finish a leased message, for [`Transport::complete_many`](super::Transport::complete_many).
#[derive(Clone, Debug)]
pub enum Completion {
    /// Done: remove it and move its group on.
    Ack(Lease),
    /// Failed for good: move it to the dead-letter table with this error, then move on.
    DeadLetter(Lease, String),
    /// As `DeadLetter`, recording this many attempts instead of the claims counted: for a job
    /// given up on without running it (its claim found it out of attempts).
    DeadLetterAfter(Lease, String, u32),
}

impl Completion {
    /// The lease it settles.
    pub fn lease(&self) -> &Lease {
        match self {
            Self::Ack(lease) | Self::DeadLetter(lease, _) | Self::DeadLetterAfter(lease, _, _) => {
                lease
            }
        }
    }
}

/// How to give a leased message back, for [`Transport::nack_many`](super::Transport::nack_many).
#[derive(Clone, Debug)]
pub struct Nack {
    /// The lease to give back.
    pub lease: Lease,
    /// Zero frees the group at once; more parks it (and its later messages) that long.
    pub delay: std::time::Duration,
    /// Recorded on the message as its last error.
    pub error: Option<String>,
    /// `false` gives the attempt back: the job never started (for example it was still
    /// buffered when the worker shut down).
    pub count_attempt: bool,
}

impl Nack {
    /// Give back at once, counting the attempt, no error.
    pub fn now(lease: Lease) -> Self {
        Self {
            lease,
            delay: std::time::Duration::ZERO,
            error: None,
            count_attempt: true,
        }
    }
}
