-- harel_resolve_dependents: resolves the dependents of jobs that ended (ADR 0033), in the
-- transaction that ended them, and records the outcomes of those that are workflow tasks.
-- Internal: called by harel_settle (completed and dead jobs that have dependents or are
-- workflow tasks), harel_end_cancelled, harel_cancel and harel_cancel_group
-- (cancelled jobs), and harel_hold (parents that had ended before their dependent was
-- enqueued).
--
-- Takes, one element per job that ended:
--   p_jobs      its id
--   p_outcomes  'completed', 'dead' or 'cancelled'
-- Returns: nothing.
-- Fence: an ended job that is a workflow task gets its outcome recorded (once: its end is
--   one transaction). A dependency row is resolved once: deleted here, by the one transaction that
--   ended its parent (the parent's lease or group row held). A dependent's count is
--   decremented under its job_waits row lock, so of several parents ending at once exactly
--   one transaction sees the count reach 0 and releases it. A cancelled job that was itself
--   waiting leaves nothing behind (its job_waits and dependency rows deleted).
-- Locks: each dependent's job_waits row, in job order; harel_release_waiting's and
--   harel_cancel's (the dependent's group row, waiting).
-- Indexes: job_dependencies' key (by parent) and job_dependencies_by_job; job_waits' key;
--   workflow_tasks_by_job.
-- Errors: harel_cancel's.
--
-- Steps:
--   1. Cancelled jobs that were waiting: their job_waits and dependency rows deleted.
--      Workflow tasks among the ended jobs: their outcomes recorded.
--   2. The dependency rows of these parents deleted; per dependent, in job order: its
--      count decremented and the outcomes added; then
--      - a parent failed (dead, cancelled) and it does not run after failure: its rows
--        deleted, and it is cancelled (harel_cancel, kept 7 days, the reason naming the
--        parent; its own dependents resolved in turn);
--      - no parent left: its row deleted, its parents' outcomes kept on its workflow task
--        if it is one, and it is released (harel_release_waiting).
CREATE OR REPLACE FUNCTION @schema@.harel_resolve_dependents(
    p_jobs     BIGINT[],
    p_outcomes TEXT[]
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
-- every table is reached by key
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- how long a dependent cancelled for its parent is kept (Client::cancel's default)
    c_keep_ms CONSTANT BIGINT := 604800000::bigint;
    r         RECORD;
    w         RECORD;
BEGIN
    IF 'cancelled' = ANY (p_outcomes) THEN
        DELETE FROM @schema@.job_waits w WHERE w.job_id = ANY (p_jobs);
        DELETE FROM @schema@.job_dependencies d WHERE d.job_id = ANY (p_jobs);
    END IF;
    -- the ended jobs that are workflow tasks: their outcomes recorded, and counted on their
    -- workflows (each workflow's row once, in id order: settles never wait in a cycle)
    FOR r IN
        WITH ended AS (
            UPDATE @schema@.workflow_tasks s
               SET outcome = e.outcome, ended_at = clock_timestamp()
              FROM unnest(p_jobs, p_outcomes) AS e(job_id, outcome)
             CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.workflow_tasks t
                                  WHERE t.job_id = e.job_id OFFSET 0) AS k
             WHERE s.ctid = k.row_ctid AND s.outcome IS NULL
            RETURNING s.workflow_id, s.outcome
        )
        SELECT x.workflow_id, count(*)::int AS n,
               count(*) FILTER (WHERE x.outcome <> 'completed')::int AS failed
          FROM ended x
         GROUP BY x.workflow_id
         ORDER BY x.workflow_id
    LOOP
        UPDATE @schema@.workflows w
           SET ended = w.ended + r.n, failed = w.failed + r.failed
         WHERE w.id = r.workflow_id;
    END LOOP;

    FOR r IN
        WITH gone AS (
            DELETE FROM @schema@.job_dependencies d
             WHERE d.parent_id = ANY (p_jobs)
            RETURNING d.parent_id, d.job_id
        )
        SELECT g.job_id, count(*)::int AS n,
               count(*) FILTER (WHERE e.outcome = 'completed')::int AS n_completed,
               count(*) FILTER (WHERE e.outcome = 'dead')::int AS n_dead,
               count(*) FILTER (WHERE e.outcome = 'cancelled')::int AS n_cancelled,
               min(g.parent_id) FILTER (WHERE e.outcome <> 'completed') AS failed_parent,
               (array_agg(e.outcome ORDER BY g.parent_id)
                    FILTER (WHERE e.outcome <> 'completed'))[1] AS failed_outcome
          FROM gone g
          JOIN unnest(p_jobs, p_outcomes) AS e(job_id, outcome) ON e.job_id = g.parent_id
         GROUP BY g.job_id
         ORDER BY g.job_id
    LOOP
        UPDATE @schema@.job_waits w
           SET waiting = w.waiting - r.n,
               completed = w.completed + r.n_completed,
               dead = w.dead + r.n_dead,
               cancelled = w.cancelled + r.n_cancelled
         WHERE w.job_id = r.job_id
        RETURNING w.waiting, w.run_after_failure, w.not_before, w.completed, w.dead,
                  w.cancelled INTO w;
        -- (no row: it was cancelled meanwhile)
        CONTINUE WHEN NOT FOUND;
        IF r.failed_parent IS NOT NULL AND NOT w.run_after_failure THEN
            DELETE FROM @schema@.job_waits t WHERE t.job_id = r.job_id;
            DELETE FROM @schema@.job_dependencies d WHERE d.job_id = r.job_id;
            PERFORM @schema@.harel_cancel(
                r.job_id,
                format('job %s, which it waited for, %s', r.failed_parent,
                       CASE r.failed_outcome WHEN 'dead' THEN 'became a dead letter'
                                             ELSE 'was cancelled' END),
                c_keep_ms);
        ELSIF w.waiting = 0 THEN
            DELETE FROM @schema@.job_waits t WHERE t.job_id = r.job_id;
            -- a workflow task keeps its parents' outcomes (a callback reads them)
            UPDATE @schema@.workflow_tasks s
               SET completed = w.completed, dead = w.dead, cancelled = w.cancelled
             WHERE s.job_id = r.job_id;
            PERFORM @schema@.harel_release_waiting(r.job_id, w.not_before);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_resolve_dependents(BIGINT[], TEXT[]) FROM PUBLIC;
