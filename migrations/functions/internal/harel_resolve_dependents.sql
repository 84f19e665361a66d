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
-- Locks: the dependents' job_waits rows, in job order; harel_release_waiting's (their
--   group rows, in group order) and harel_cancel's (a cancelled one's group row), waiting.
-- Indexes: job_dependencies' key (by parent) and job_dependencies_by_job; job_waits' key;
--   workflow_tasks_by_job.
-- Errors: harel_cancel's.
--
-- Steps:
--   1. Cancelled jobs that were waiting: their job_waits and dependency rows deleted.
--      Workflow tasks among the ended jobs: their outcomes recorded.
--   2. The dependency rows of these parents deleted and counted per dependent; the
--      dependents' rows locked in job order, then (set-based) their counts decremented and
--      the outcomes added:
--      - no parent left (and none failed, or it runs after failure): its row deleted, its
--        parents' outcomes kept on its workflow task if it is one, and released
--        (harel_release_waiting, one call for all);
--      - a parent failed (dead, cancelled) and it does not run after failure: its rows
--        deleted, and it is cancelled (harel_cancel, kept 7 days, the reason naming the
--        parent; its own dependents resolved in turn).
CREATE OR REPLACE FUNCTION "harel".harel_resolve_dependents(
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
    v_children        BIGINT[];
    v_n               INT[];
    v_completed       INT[];
    v_dead            INT[];
    v_cancelled       INT[];
    v_failed_parents  BIGINT[];
    v_failed_outcomes TEXT[];
    v_cancel          BIGINT[];
    v_reasons         TEXT[];
    v_release         BIGINT[];
    v_groups          TEXT[];
    v_starts          TIMESTAMPTZ[];
    v_ended_at        TIMESTAMPTZ;
BEGIN
    IF 'cancelled' = ANY (p_outcomes) THEN
        DELETE FROM "harel".job_waits w WHERE w.job_id = ANY (p_jobs);
        DELETE FROM "harel".job_dependencies d WHERE d.job_id = ANY (p_jobs);
    END IF;
    -- the ended jobs that are workflow tasks: their outcomes recorded, and counted for
    -- their workflows as rows of workflow_ends (appended: no row that every settle of a
    -- workflow would wait for)
    -- (the time taken before: Citus takes no volatile function in an UPDATE)
    v_ended_at := clock_timestamp();
    WITH ended AS (
        UPDATE "harel".workflow_tasks s
           SET outcome = e.outcome, ended_at = v_ended_at
          FROM unnest(p_jobs, p_outcomes) AS e(job_id, outcome)
         CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM "harel".workflow_tasks t
                              WHERE t.job_id = e.job_id OFFSET 0) AS k
         WHERE s.ctid = k.row_ctid AND s.outcome IS NULL
        RETURNING s.workflow_id, s.outcome
    )
    INSERT INTO "harel".workflow_ends (workflow_id, ended, failed, cancelled)
    SELECT x.workflow_id, count(*)::int, count(*) FILTER (WHERE x.outcome <> 'completed')::int,
           count(*) FILTER (WHERE x.outcome = 'cancelled')::int
      FROM ended x
     GROUP BY x.workflow_id;

    -- The dependents of these parents (read, not locked); then their rows locked in job
    -- order, before their dependency rows are touched: every function that changes a
    -- dependent's dependency rows holds its job_waits row first (this one, a cancel's
    -- cleanup above, a workflow retry), so two transactions resolving parents of the same
    -- dependents never wait for each other in a cycle, and of several ending its parents
    -- exactly one sees its count reach 0.
    SELECT array_agg(DISTINCT d.job_id ORDER BY d.job_id) INTO v_children
      FROM "harel".job_dependencies d
     WHERE d.parent_id = ANY (p_jobs);
    IF v_children IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM "harel".job_waits w
     WHERE w.job_id = ANY (v_children)
     ORDER BY w.job_id
       FOR UPDATE;

    -- The dependency rows of these parents, resolved once (deleted here: a new statement,
    -- which sees the deletions of the transactions we waited for), counted per dependent
    WITH gone AS (
        DELETE FROM "harel".job_dependencies d
         WHERE d.parent_id = ANY (p_jobs)
        RETURNING d.parent_id, d.job_id
    )
    SELECT array_agg(c.job_id ORDER BY c.job_id), array_agg(c.n ORDER BY c.job_id),
           array_agg(c.n_completed ORDER BY c.job_id), array_agg(c.n_dead ORDER BY c.job_id),
           array_agg(c.n_cancelled ORDER BY c.job_id),
           array_agg(c.failed_parent ORDER BY c.job_id),
           array_agg(c.failed_outcome ORDER BY c.job_id)
      INTO v_children, v_n, v_completed, v_dead, v_cancelled, v_failed_parents,
           v_failed_outcomes
      FROM (SELECT g.job_id, count(*)::int AS n,
                   count(*) FILTER (WHERE e.outcome = 'completed')::int AS n_completed,
                   count(*) FILTER (WHERE e.outcome = 'dead')::int AS n_dead,
                   count(*) FILTER (WHERE e.outcome = 'cancelled')::int AS n_cancelled,
                   min(g.parent_id) FILTER (WHERE e.outcome <> 'completed') AS failed_parent,
                   (array_agg(e.outcome ORDER BY g.parent_id)
                        FILTER (WHERE e.outcome <> 'completed'))[1] AS failed_outcome
              FROM gone g
              -- (a hash join of the batch with what it deleted: linear in both)
              JOIN unnest(p_jobs, p_outcomes) AS e(job_id, outcome) ON e.job_id = g.parent_id
             GROUP BY g.job_id) AS c;
    IF v_children IS NULL THEN
        RETURN;
    END IF;

    -- Each dependent's count (its row locked above: a statement after the locks, it sees
    -- the counts they committed)
    WITH counted AS (
        UPDATE "harel".job_waits w
           SET waiting = w.waiting - x.n,
               completed = w.completed + x.n_completed,
               dead = w.dead + x.n_dead,
               cancelled = w.cancelled + x.n_cancelled
          FROM unnest(v_children, v_n, v_completed, v_dead, v_cancelled, v_failed_parents,
                      v_failed_outcomes)
               AS x(job_id, n, n_completed, n_dead, n_cancelled, failed_parent,
                    failed_outcome)
         CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM "harel".job_waits t
                              WHERE t.job_id = x.job_id OFFSET 0) AS k
         WHERE w.ctid = k.row_ctid
        RETURNING w.job_id, w.group_id, w.waiting, w.run_after_failure, w.not_before,
                  w.delay_ms, w.completed, w.dead, w.cancelled, x.failed_parent,
                  x.failed_outcome
    )
    SELECT array_agg(c.job_id) FILTER (WHERE c.failed_parent IS NOT NULL
                                         AND NOT c.run_after_failure),
           array_agg(format('job %s, which it waited for, %s', c.failed_parent,
                            CASE c.failed_outcome WHEN 'dead' THEN 'became a dead letter'
                                                  ELSE 'was cancelled' END))
               FILTER (WHERE c.failed_parent IS NOT NULL AND NOT c.run_after_failure),
           array_agg(c.job_id ORDER BY c.job_id)
               FILTER (WHERE c.waiting = 0
                         AND (c.failed_parent IS NULL OR c.run_after_failure)),
           array_agg(c.group_id ORDER BY c.job_id)
               FILTER (WHERE c.waiting = 0
                         AND (c.failed_parent IS NULL OR c.run_after_failure)),
           -- (a delay counts from the release: now)
           array_agg(COALESCE(c.not_before,
                              clock_timestamp() + c.delay_ms * interval '1 millisecond')
                     ORDER BY c.job_id)
               FILTER (WHERE c.waiting = 0
                         AND (c.failed_parent IS NULL OR c.run_after_failure)),
           array_agg(c.completed ORDER BY c.job_id)
               FILTER (WHERE c.waiting = 0
                         AND (c.failed_parent IS NULL OR c.run_after_failure)),
           array_agg(c.dead ORDER BY c.job_id)
               FILTER (WHERE c.waiting = 0
                         AND (c.failed_parent IS NULL OR c.run_after_failure)),
           array_agg(c.cancelled ORDER BY c.job_id)
               FILTER (WHERE c.waiting = 0
                         AND (c.failed_parent IS NULL OR c.run_after_failure))
      INTO v_cancel, v_reasons, v_release, v_groups, v_starts, v_completed, v_dead,
           v_cancelled
      FROM counted c;

    -- The released: their waits gone, a workflow task's parents' outcomes kept (a callback
    -- reads them), their own start times back (harel_release_waiting, one call).
    IF v_release IS NOT NULL THEN
        DELETE FROM "harel".job_waits w WHERE w.job_id = ANY (v_release);
        UPDATE "harel".workflow_tasks s
           SET completed = x.completed, dead = x.dead, cancelled = x.cancelled
          FROM unnest(v_release, v_completed, v_dead, v_cancelled)
               AS x(job_id, completed, dead, cancelled)
         CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM "harel".workflow_tasks t
                              WHERE t.job_id = x.job_id OFFSET 0) AS k
         WHERE s.ctid = k.row_ctid;
        PERFORM "harel".harel_release_waiting(v_release, v_groups, v_starts);
    END IF;
    -- The cancelled (a parent failed): their rows gone, each cancelled with a reason naming
    -- the parent (harel_cancel: their own dependents resolved in turn). Rare: one by one.
    IF v_cancel IS NOT NULL THEN
        DELETE FROM "harel".job_waits w WHERE w.job_id = ANY (v_cancel);
        DELETE FROM "harel".job_dependencies d WHERE d.job_id = ANY (v_cancel);
        FOR i IN 1..cardinality(v_cancel) LOOP
            PERFORM "harel".harel_cancel(v_cancel[i], v_reasons[i], c_keep_ms);
        END LOOP;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_resolve_dependents(BIGINT[], TEXT[]) FROM PUBLIC;
