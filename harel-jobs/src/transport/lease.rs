//! Leases: the token a claim takes, what it hands back, and how fenced writes end.

use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::vocabulary::{JobId, Priority};

/// The fencing token of one claim. Every write a lease holder makes (settle, extend) is
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

/// The right to complete one message: its group, its job's id and the claim's token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The group (execution id).
    pub group: String,
    /// The job's id: unique, increasing in publish order (the `seq` column). Named `seq`
    /// before 0.2.
    pub id: JobId,
    /// The claim's fencing token.
    pub token: LeaseToken,
}

/// A message handed out by a claim, with its lease.
#[derive(Clone, Debug)]
pub struct ClaimedMessage {
    /// What to pass to settle or extend.
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
    /// The trace context it was published with
    /// ([`OutgoingMessage::trace_context`](super::OutgoingMessage::trace_context)), if any;
    /// as stored, which a claim does not check again.
    pub trace_context: Option<String>,
}

/// The outcome of a fenced write.
#[must_use = "a lost lease means another worker may be running the job"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseOutcome {
    /// The lease was still held: the write happened.
    Applied,
    /// The write had already happened: the same settle batch was sent again under its
    /// [`Receipt`](super::Receipt) (its first reply was lost), and nothing changed this time.
    AlreadyApplied,
    /// The group is no longer leased to this token at this message (the lease lapsed and
    /// another worker claimed it, or the message was already settled): nothing changed.
    LeaseLost,
    /// The lease was still held, but a cancel of the job had been asked for while it ran
    /// (`Client::cancel`): whatever the settlement said, the job ended as cancelled and its
    /// group moved on.
    Cancelled,
}

impl LeaseOutcome {
    /// Whether the write happened (now, or when the batch was first sent); a
    /// [`Cancelled`](Self::Cancelled) lease was ended too.
    pub fn is_applied(self) -> bool {
        matches!(self, Self::Applied | Self::AlreadyApplied | Self::Cancelled)
    }

    pub(crate) fn from_applied(applied: bool) -> Self {
        if applied {
            Self::Applied
        } else {
            Self::LeaseLost
        }
    }
}

/// What a heartbeat found about one lease ([`Transport::heartbeat`](super::Transport::heartbeat)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// Still held, and extended.
    Held,
    /// Still held and extended, and a cancel of the job was asked for: stop the handler;
    /// its settlement will end the job as cancelled whatever it says.
    CancelRequested,
    /// Lost: the group is no longer leased to this token at this message.
    Lost,
}
