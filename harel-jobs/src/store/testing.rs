//! The test helpers' statements (feature `testing`): make jobs due now that wait for a
//! time, so a test can run scheduled jobs and retries without waiting for them.
//!
//! Plain statements on the tables, not functions: only a test's own schema, whose pool is
//! its owner, runs them. What they touch follows the transport's data model (migration
//! 0001 and 0004, ADR 0011 and 0033):
//! - a job's own time is its `not_before` (`inline_not_before` on the group row for the
//!   group's inline first message); the pending time, 9999-12-31, marks a job that waits
//!   for its parents, and is never touched (its parents' settle releases it);
//! - a group that is free (`locked_by` NULL) and timed (`fair_tag` NULL) waits until
//!   `available_at`: its head's time, or the end of the park after a release (a retry's
//!   backoff, a snooze). Setting it to the statement's time puts it in the claim's next scan
//!   (above the claim floors, which stay 250 ms below the times the claims saw). A leased
//!   group is never touched, nor one whose head is not due (pending, or still scheduled).
//!   The group's order (its messages' seq) is not changed: FIFO per group holds.
//!
//! Locks: `FOR NO KEY UPDATE SKIP LOCKED` on the rows changed (groups, messages), in no
//! order: they never wait, as the claims and the heartbeat (harel-jobs/sql/README.md, "Row
//! locks"); a row another transaction holds (a settle, a cancel) is left as it is (a drain
//! running beside a worker pool on the same schema may so end without it).

/// Scheduled jobs made due: every queued job (or only job `$2`) whose own time is in the
/// future (but not the pending time) gets the statement's time. Returns the groups whose
/// head was among them (and whose wait was so for that head), for
/// [`GROUPS_DUE_NOW`].
pub(super) const JOBS_DUE_NOW: &str = "
WITH inline AS (
    UPDATE @schema@.transport_groups g
       SET inline_not_before = statement_timestamp()
      FROM (SELECT t.group_id
              FROM @schema@.transport_groups t
             WHERE t.inline_seq IS NOT NULL
               AND t.inline_not_before > statement_timestamp()
               AND t.inline_not_before < timestamptz '9999-12-31 00:00:00+00'
               AND ($1::bigint IS NULL OR t.inline_seq = $1)
               FOR NO KEY UPDATE SKIP LOCKED) AS l
     WHERE g.group_id = l.group_id
    RETURNING g.group_id
), queued AS (
    UPDATE @schema@.transport_messages m
       SET not_before = statement_timestamp()
      FROM (SELECT t.group_id, t.seq
              FROM @schema@.transport_messages t
             WHERE t.not_before > statement_timestamp()
               AND t.not_before < timestamptz '9999-12-31 00:00:00+00'
               AND ($1::bigint IS NULL OR t.seq = $1)
               FOR NO KEY UPDATE SKIP LOCKED) AS l
     WHERE m.group_id = l.group_id AND m.seq = l.seq
    RETURNING m.group_id, m.seq
)
SELECT count(*)::bigint,
       COALESCE(array_agg(x.group_id) FILTER (WHERE x.head), ARRAY[]::text[])
  FROM (SELECT i.group_id, true AS head FROM inline i
        UNION ALL
        -- a queued message is its group's head when the group has no inline message and
        -- no older message (this statement's snapshot: the rows as they were, same seqs)
        SELECT q.group_id,
               NOT EXISTS (SELECT 1 FROM @schema@.transport_groups g
                            WHERE g.group_id = q.group_id AND g.inline_seq IS NOT NULL)
               AND NOT EXISTS (SELECT 1 FROM @schema@.transport_messages o
                                WHERE o.group_id = q.group_id AND o.seq < q.seq)
          FROM queued q) AS x";

/// Groups made due: the free, timed groups waiting past now whose head is due, either
/// because `$1` (every such group: retries' backoffs and snoozes end now) or because the
/// group is in `$2` (its head was just made due). `$3`: only the group whose head is job
/// `$3`. Returns how many.
pub(super) const GROUPS_DUE_NOW: &str = "
WITH waiting AS (
    -- only the rows it changes are locked (a row locked and left as it is would hold a
    -- cancel or a run-now of that job until the test's transaction ends)
    SELECT g.group_id
      FROM @schema@.transport_groups g
      LEFT JOIN LATERAL (SELECT m.seq, m.not_before
                           FROM @schema@.transport_messages m
                          WHERE g.inline_seq IS NULL AND m.group_id = g.group_id
                          ORDER BY m.seq
                          LIMIT 1) AS h ON true
     WHERE g.locked_by IS NULL
       AND g.fair_tag IS NULL
       AND g.available_at > statement_timestamp()
       AND ($1 OR g.group_id = ANY ($2::text[]))
       AND COALESCE(g.inline_seq, h.seq) IS NOT NULL
       AND COALESCE(CASE WHEN g.inline_seq IS NOT NULL THEN g.inline_not_before
                         ELSE h.not_before END, '-infinity') <= statement_timestamp()
       AND ($3::bigint IS NULL OR COALESCE(g.inline_seq, h.seq) = $3)
       FOR NO KEY UPDATE OF g SKIP LOCKED
), made AS (
    UPDATE @schema@.transport_groups g
       SET available_at = statement_timestamp()
      FROM waiting w
     WHERE g.group_id = w.group_id
       -- still as read (a row changed since is left to the claim)
       AND g.locked_by IS NULL AND g.fair_tag IS NULL
    RETURNING g.group_id
)
SELECT count(*)::bigint FROM made";

/// What [`Store::jobs_due_now`](super::Store::jobs_due_now) did: how many jobs it moved
/// and the groups whose head it moved.
#[cfg(feature = "testing")]
pub(crate) type JobsDueNow = (i64, Vec<String>);

#[cfg(feature = "testing")]
impl super::Store {
    /// Scheduled jobs made due now (all, or only job `id`): see [`JOBS_DUE_NOW`].
    pub(crate) async fn jobs_due_now<'e, E: sqlx::PgExecutor<'e>>(
        &self,
        executor: E,
        id: Option<i64>,
    ) -> Result<JobsDueNow, sqlx::Error> {
        sqlx::query_as(self.sql(super::Statement::JobsDueNow))
            .bind(id)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// Groups made due now: every free group parked past now whose head is due
    /// (`parked`), or those of `groups`; only the one whose head is job `id`, if given. See
    /// [`GROUPS_DUE_NOW`]. Returns how many.
    pub(crate) async fn groups_due_now<'e, E: sqlx::PgExecutor<'e>>(
        &self,
        executor: E,
        parked: bool,
        groups: &[String],
        id: Option<i64>,
    ) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar(self.sql(super::Statement::GroupsDueNow))
            .bind(parked)
            .bind(groups)
            .bind(id)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }
}
