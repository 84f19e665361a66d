//! A look at the queue's state, for dashboards, tests and examples.

use sqlx::{AssertSqlSafe, PgExecutor};

use crate::error::DatabaseError;
use crate::schema::Schema;

/// Counts of the queue's contents at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Jobs in the queue (waiting, running, or parked for a retry).
    pub jobs: i64,
    /// Groups with jobs.
    pub groups: i64,
    /// Groups a worker could claim right now (the others are leased, or parked until a
    /// retry, a delay or a snooze is over).
    pub claimable_groups: i64,
    /// Dead letters.
    pub dead_letters: i64,
}

impl QueueStats {
    /// Reads the counts of the queue in `schema`, in one round trip. Counting scans the
    /// tables: fine for dashboards, not for a hot path.
    ///
    /// # Errors
    /// The database's error.
    pub async fn fetch<'e, E: PgExecutor<'e>>(
        executor: E,
        schema: &Schema,
    ) -> Result<Self, DatabaseError> {
        let (jobs, groups, claimable_groups, dead_letters): (i64, i64, i64, i64) =
            sqlx::query_as(AssertSqlSafe(schema.render(
                "SELECT (SELECT count(*) FROM @schema@.transport_messages),
                        count(*),
                        count(*) FILTER (WHERE available_at <= now()),
                        (SELECT count(*) FROM @schema@.dead_letters)
                   FROM @schema@.transport_groups",
            )))
            .fetch_one(executor)
            .await?;
        Ok(Self {
            jobs,
            groups,
            claimable_groups,
            dead_letters,
        })
    }

    /// Whether no job is waiting, running or parked.
    pub fn is_idle(&self) -> bool {
        self.jobs == 0
    }
}
