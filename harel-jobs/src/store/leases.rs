//! Leases: the fenced writes of a lease holder, settle and extend. Each applies only while
//! the group is still leased to that token at that message (the fence the names say).

use sqlx::PgExecutor;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use uuid::Uuid;

use super::{Statement, Store};

pub(super) const SETTLE_IF_HELD: &str = "SELECT seq, outcome \
     FROM @schema@.harel_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

pub(super) const EXTEND_IF_HELD: &str =
    "SELECT seq, extended, cancel_requested FROM @schema@.harel_extend($1, $2, $3, $4)";

/// The lease columns of a fenced write: groups, seqs and tokens, one element per lease, in
/// the caller's order (the functions answer one row per lease, in that order).
#[derive(Debug, Default)]
pub(crate) struct LeaseColumns<'a> {
    groups: Vec<&'a str>,
    seqs: Vec<i64>,
    tokens: Vec<Uuid>,
}

impl<'a> LeaseColumns<'a> {
    /// Empty columns for `capacity` leases.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            groups: Vec::with_capacity(capacity),
            seqs: Vec::with_capacity(capacity),
            tokens: Vec::with_capacity(capacity),
        }
    }

    /// Appends one lease.
    pub(crate) fn push(&mut self, group: &'a str, seq: i64, token: Uuid) {
        self.groups.push(group);
        self.seqs.push(seq);
        self.tokens.push(token);
    }

    /// The seqs, in order: what the rows of the reply are matched against.
    pub(crate) fn seqs(&self) -> &[i64] {
        &self.seqs
    }

    /// Binds the three columns, as the functions' first three parameters.
    fn bind<'q, O>(
        &self,
        query: QueryAs<'q, sqlx::Postgres, O, PgArguments>,
    ) -> QueryAs<'q, sqlx::Postgres, O, PgArguments>
    where
        'a: 'q,
    {
        query
            .bind(self.groups.clone())
            .bind(self.seqs.clone())
            .bind(self.tokens.clone())
    }
}

/// What `harel_settle` writes for each lease, one element per lease, in the order of the
/// [`LeaseColumns`].
#[derive(Debug, Default)]
pub(crate) struct Settle {
    /// `ack`, `retain`, `dead` or `release`.
    pub actions: Vec<&'static str>,
    /// The retention (`retain`) or the release's delay, in milliseconds.
    pub delays: Vec<Option<i64>>,
    /// The error text recorded (dead letter, release).
    pub errors: Vec<Option<String>>,
    /// For a release: whether the claim's attempt counts.
    pub count_attempts: Vec<Option<bool>>,
    /// For a dead letter: the attempts to record instead of the claims counted.
    pub attempts: Vec<Option<i32>>,
    /// The batch's receipt, which makes the batch safe to send again.
    pub receipt: Option<Uuid>,
    /// The previous batch's receipt, which the database drops.
    pub forget: Option<Uuid>,
    /// The worker pool settling, recorded with the attempts that end.
    pub worker: Option<Uuid>,
}

impl Store {
    /// `harel_settle`: settles each lease that is still held (ack, retain, dead letter,
    /// release). Returns `(seq, outcome)` per lease, in order: `applied`, `replayed` (the
    /// receipt's batch applied it before), `lost` or `cancelled`.
    pub(crate) async fn leases_settle_if_held<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        leases: &LeaseColumns<'_>,
        settle: Settle,
    ) -> Result<Vec<(i64, String)>, sqlx::Error> {
        leases
            .bind(sqlx::query_as(self.sql(Statement::LeasesSettleIfHeld)))
            .bind(settle.actions)
            .bind(settle.delays)
            .bind(settle.errors)
            .bind(settle.count_attempts)
            .bind(settle.attempts)
            .bind(settle.receipt)
            .bind(settle.forget)
            .bind(settle.worker)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_extend`: pushes the end of each lease that is still held to now + `lease_ms`
    /// (database clock), never waiting for a row lock. Returns `(seq, extended, cancel
    /// requested)` per lease, in order.
    pub(crate) async fn leases_extend_if_held<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        leases: &LeaseColumns<'_>,
        lease_ms: i64,
    ) -> Result<Vec<(i64, bool, bool)>, sqlx::Error> {
        leases
            .bind(sqlx::query_as(self.sql(Statement::LeasesExtendIfHeld)))
            .bind(lease_ms)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }
}
