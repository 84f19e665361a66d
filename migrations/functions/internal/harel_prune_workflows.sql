-- harel_prune_workflows: deletes the workflows that ended long enough ago, walking a bounded
-- stretch of workflow_tasks per call (ADR 0040). Internal: called by harel_maintain, under
-- its housekeeping lock (one call at a time).
--
-- A workflow is pruned once every task has ended, the last at least 7 days ago (the time a
-- cancelled job is kept unless its cancel said otherwise), and none of its tasks' jobs is
-- kept any more (queued, in job_history, in dead_letters): it lives as long as the
-- longest-kept record of its tasks, and at least a week after its end. A dead letter keeps
-- its workflow (retried, it goes back into it).
--
-- Takes: nothing.
-- Returns: how many workflows it deleted (their rows of `workflows`: the other rows go in
--   the calls after).
-- Fence: the walk's cursor, (workflow_sweep, workflow_sweep_task): a workflow id and a task
--   ordinal, sequences set outside MVCC (a rolled-back call leaves it moved; the next walk
--   comes back). A workflow's row is deleted only if the walk read every one of its tasks
--   prunable, beginning at its first (the cursor stays inside a workflow only while all it
--   read was): its tasks' ends are final (a task whose job is gone cannot be retried), so
--   the answer cannot change under it. The row is locked SKIP LOCKED: a retry holding it
--   keeps it this time.
-- Locks: the deleted rows; never waits.
-- Indexes: workflow_tasks' key (workflow_id, ordinal), a range of at most 1,000 rows from
--   the cursor (read again, by key, for the workflows whose tasks all ended long ago);
--   workflows' key per workflow of the range; the key of dead_letters or job_history per
--   job of those (an ended task's job is kept only where its outcome puts it);
--   workflow_ends_by_workflow and workflow_reruns' key for the pruned workflows. A call
--   reads at most 1,000 task rows (twice), looks up at most 1,000 jobs and deletes at most
--   1,000 rows of each table, whatever the number of workflows.
-- Errors: none of its own.
--
-- Steps:
--   1. The next 1,000 rows of workflow_tasks after the cursor, in key order (from the
--      first once past the last), per workflow: its first and last task read, whether
--      every one ended 7 days ago, its row (by key).
--   2. For those all ended long ago: whether a job of theirs is still kept.
--   3. Those read whole (from their first task, or from where the walk stopped inside
--      them) and prunable: their rows of workflows deleted.
--   4. Those whose row is gone (deleted by an earlier call, or now with the range holding
--      their first task): their rows of workflow_ends (1,000 a call), then, once none is
--      left, their rows of the range and of workflow_reruns.
--   5. The cursor: kept while step 4 had more to delete; else back to the first task of a
--      workflow deleted now whose first tasks an earlier call read (they go next call);
--      else past the range (inside its last workflow if that one may still be pruned or
--      is being deleted), or back to the first at the end.
CREATE OR REPLACE FUNCTION "harel".harel_prune_workflows()
RETURNS INT
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
    -- task rows walked per call, and rows of workflow_ends deleted per call
    c_rows      CONSTANT INT := 1000;
    -- how long after its last task ended a workflow is kept at least
    c_keep      CONSTANT INTERVAL := interval '7 days';
    c_past      CONSTANT INT := 2147483647;
    v_wf        BIGINT;
    v_ord       INT;
    v_horizon   TIMESTAMPTZ;
    v_n         INT;
    v_g_wf      BIGINT[];
    v_g_first   INT[];
    v_g_last    INT[];
    v_g_old     BOOLEAN[];
    v_g_tasks   INT[];
    v_g_orphan  BOOLEAN[];
    v_kept      BIGINT[];
    v_prune     BIGINT[];
    v_pruned    BIGINT[];
    v_orphans   BIGINT[];
    v_deleted   INT := 0;
    v_more      BOOLEAN := false;
    v_last      INT;
    v_next_wf   BIGINT;
    v_next_ord  INT;
    v_restart   BIGINT;
    v_end_wf    BIGINT;
    v_end_ord   INT;
BEGIN
    v_wf := COALESCE(pg_sequence_last_value('"harel".workflow_sweep'::regclass), 0);
    v_ord := LEAST(COALESCE(pg_sequence_last_value('"harel".workflow_sweep_task'::regclass), 0),
                   c_past)::int;
    v_horizon := statement_timestamp() - c_keep;

    -- 1. The range, in key order, per workflow: its first and last task read,
    -- whether every task read is marked, and its row (looked up by key)
    SELECT array_agg(g.wf ORDER BY g.wf), array_agg(g.first_ord ORDER BY g.wf),
           array_agg(g.last_ord ORDER BY g.wf), array_agg(g.old ORDER BY g.wf),
           array_agg(w.tasks ORDER BY g.wf), array_agg(w.id IS NULL ORDER BY g.wf),
           COALESCE(sum(g.n), 0)::int
      INTO v_g_wf, v_g_first, v_g_last, v_g_old, v_g_tasks, v_g_orphan, v_n
      FROM (SELECT t.workflow_id AS wf, min(t.ordinal) AS first_ord,
                   max(t.ordinal) AS last_ord,
                   bool_and(t.outcome IS NOT NULL AND t.ended_at <= v_horizon) AS old,
                   count(*) AS n
              FROM (SELECT x.workflow_id, x.ordinal, x.outcome, x.ended_at
                      FROM "harel".workflow_tasks x
                     WHERE (x.workflow_id, x.ordinal) > (v_wf, v_ord)
                     ORDER BY x.workflow_id, x.ordinal
                     LIMIT c_rows) AS t
             GROUP BY t.workflow_id) AS g
      LEFT JOIN LATERAL (SELECT x.id, x.tasks FROM "harel".workflows x
                          WHERE x.id = g.wf OFFSET 0) AS w ON true;
    IF v_n = 0 THEN
        -- past the last: from the first again
        PERFORM setval('"harel".workflow_sweep'::regclass, 0, false);
        PERFORM setval('"harel".workflow_sweep_task'::regclass, 0, false);
        RETURN 0;
    END IF;
    v_last := cardinality(v_g_wf);
    -- the range's last row (scalars: Citus takes no subscripted variable in a write)
    v_end_wf := v_g_wf[v_last];
    v_end_ord := v_g_last[v_last];
    -- 2. The workflows whose tasks read all ended long ago: is one of their jobs kept?
    -- (read again by key, these tasks alone; an ended task's job is kept only where its
    -- outcome puts it: a dead letter, or job_history)
    IF true = ANY (SELECT g.old AND NOT g.orphan
                     FROM unnest(v_g_old, v_g_orphan) AS g(old, orphan)) THEN
        SELECT array_agg(DISTINCT g.wf) INTO v_kept
          FROM unnest(v_g_wf, v_g_first, v_g_last, v_g_old, v_g_orphan)
               AS g(wf, first_ord, last_ord, old, orphan)
         CROSS JOIN LATERAL (SELECT x.job_id, x.outcome FROM "harel".workflow_tasks x
                              WHERE x.workflow_id = g.wf
                                AND x.ordinal BETWEEN g.first_ord AND g.last_ord) AS t
         WHERE g.old AND NOT g.orphan
           AND CASE WHEN t.outcome = 'dead'
                    THEN EXISTS (SELECT 1 FROM "harel".dead_letters d WHERE d.id = t.job_id)
                    ELSE EXISTS (SELECT 1 FROM "harel".job_history h WHERE h.id = t.job_id)
               END;
    END IF;

    -- 3. Read whole (from its first task, or from where the walk stopped inside it) and
    -- prunable: its row deleted, unless a retry holds it
    SELECT array_agg(g.wf) INTO v_prune
      FROM unnest(v_g_wf, v_g_first, v_g_last, v_g_old, v_g_tasks, v_g_orphan)
           AS g(wf, first_ord, last_ord, old, tasks, orphan)
     WHERE g.old AND NOT g.orphan AND g.last_ord = g.tasks
       AND (g.first_ord = 1 OR (g.wf = v_wf AND g.first_ord = v_ord + 1))
       AND NOT EXISTS (SELECT 1 FROM unnest(v_kept) AS k(wf) WHERE k.wf = g.wf);
    IF v_prune IS NOT NULL THEN
        WITH d AS (
            DELETE FROM "harel".workflows w
             WHERE w.id = ANY (ARRAY(SELECT x.id FROM "harel".workflows x
                                      WHERE x.id = ANY (v_prune)
                                      ORDER BY x.id
                                        FOR UPDATE SKIP LOCKED))
            RETURNING w.id
        )
        SELECT array_agg(d.id) INTO v_pruned FROM d;
    END IF;

    -- 4. Workflows deleted, by an earlier call or by this one when the range began at
    -- their first task: their counts first (at most c_rows rows a call), then, once none is
    -- left, their tasks of the range and their copies
    SELECT array_agg(g.wf) INTO v_orphans
      FROM unnest(v_g_wf, v_g_orphan, v_g_first) AS g(wf, orphan, first_ord)
     WHERE g.orphan
        OR (g.first_ord = 1 AND EXISTS (SELECT 1 FROM unnest(v_pruned) AS p(id)
                                         WHERE p.id = g.wf));
    IF v_orphans IS NOT NULL THEN
        WITH d AS (
            DELETE FROM "harel".workflow_ends e
             WHERE e.workflow_id = ANY (v_orphans)
               AND e.ctid = ANY (ARRAY(SELECT x.ctid FROM "harel".workflow_ends x
                                        WHERE x.workflow_id = ANY (v_orphans)
                                        LIMIT c_rows))
            RETURNING 1
        )
        SELECT count(*)::int INTO v_deleted FROM d;
        v_more := v_deleted = c_rows;
        IF NOT v_more THEN
            DELETE FROM "harel".workflow_tasks t
             WHERE t.workflow_id = ANY (v_orphans)
               AND (t.workflow_id, t.ordinal) > (v_wf, v_ord)
               AND (t.workflow_id, t.ordinal) <= (v_end_wf, v_end_ord);
            DELETE FROM "harel".workflow_reruns r
             WHERE r.workflow_id = ANY (v_orphans)
               AND (r.workflow_id, r.ordinal) > (v_wf, v_ord)
               AND (r.workflow_id, r.ordinal) <= (v_end_wf, v_end_ord);
        END IF;
    END IF;

    -- 5. Where the next call begins
    SELECT min(p.id) INTO v_restart
      FROM unnest(v_pruned) AS p(id)
     WHERE NOT EXISTS (SELECT 1 FROM unnest(v_orphans) AS o(wf) WHERE o.wf = p.id);
    IF v_more THEN
        v_next_wf := v_wf;
        v_next_ord := v_ord;
    ELSIF v_restart IS NOT NULL THEN
        -- (a workflow the walk had begun in an earlier call: its first tasks are behind)
        v_next_wf := v_restart;
        v_next_ord := 0;
    ELSIF v_n < c_rows THEN
        v_next_wf := 0;
        v_next_ord := 0;
    ELSE
        v_next_wf := v_g_wf[v_last];
        -- inside the last workflow: on where it stopped if it is being deleted, or if
        -- every task of it read so far is prunable (read from its first); else past it
        IF v_g_orphan[v_last] OR v_g_wf[v_last] = ANY (v_orphans)
           OR (v_g_old[v_last] AND v_g_last[v_last] < v_g_tasks[v_last]
               AND (v_g_first[v_last] = 1
                    OR (v_g_wf[v_last] = v_wf AND v_g_first[v_last] = v_ord + 1))
               AND NOT EXISTS (SELECT 1 FROM unnest(v_kept) AS k(wf)
                                WHERE k.wf = v_g_wf[v_last])) THEN
            v_next_ord := v_g_last[v_last];
        ELSE
            v_next_ord := c_past;
        END IF;
    END IF;
    PERFORM setval('"harel".workflow_sweep'::regclass, GREATEST(v_next_wf, 0),
                   v_next_wf > 0);
    PERFORM setval('"harel".workflow_sweep_task'::regclass, GREATEST(v_next_ord, 0),
                   v_next_ord > 0);
    RETURN COALESCE(cardinality(v_pruned), 0);
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_prune_workflows() FROM PUBLIC;
