-- harel_cancel_workflow: cancels a workflow's tasks that have not ended, a page at a time
-- (ADR 0033). An operator's entry point.
--
-- Takes:
--   p_id       the workflow's id
--   p_reason   kept with each cancelled job: at most 8,192 bytes, or NULL
--   p_keep_ms  how long the cancelled jobs are kept in job_history, 0 to 100 years
--   p_before   the cursor: tasks before this ordinal (NULL: from the last)
--   p_limit    1 to 10,000 tasks per call
-- Returns one row: cancelled (tasks cancelled now), requested (running tasks asked to
--   stop: they end as cancelled when their handlers return), next (the ordinal to pass
--   as p_before for the rest, or NULL when none is left).
-- Fence: harel_cancel's, per task: a task that ended meanwhile is left as it ended. The
--   first page marks the workflow cancelled (workflows.cancelled_at) if a task has not
--   ended: it reads cancelled from then on, until a retry of its tasks (ADR 0040).
--   Steps are cancelled from the last to the first, so that each gets p_reason rather
--   than the reason its cancelled parent would give it.
-- Locks: the first page, the workflow's row (its mark; a retry takes that row first too),
--   before anything else; then FOR NO KEY UPDATE of the page's jobs' group rows, in one
--   statement, in group order, waiting (as a settle takes its own and its dependents'),
--   then harel_cancel's (already held). A cancel that cascades to jobs waiting for a
--   cancelled one (outside the page) takes their groups without waiting, and leaves those
--   another transaction holds to housekeeping (harel_resolve_dependents, ADR 0037): it
--   never waits for a group after the page's.
-- Indexes: workflows' key; workflow_tasks' key (workflow_id, ordinal), forward to the
--   first task not ended (the mark), backward from p_before; a job's
--   group by the job's id (transport_groups' key and transport_groups_by_inline_id,
--   transport_messages_by_id).
-- Errors: 22023 for a limit out of range; harel_cancel's.
CREATE OR REPLACE FUNCTION "harel".harel_cancel_workflow(
    p_id      BIGINT,
    p_reason  TEXT,
    p_keep_ms BIGINT,
    p_before  INT,
    p_limit   INT
) RETURNS TABLE (cancelled INT, requested INT, next INT)
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
    v_cancelled INT := 0;
    v_requested INT := 0;
    v_last      INT;
    v_seen      INT := 0;
    v_outcome   TEXT;
    v_ordinals  INT[];
    v_jobs      BIGINT[];
    v_groups    TEXT[];
    v_now       TIMESTAMPTZ;
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'harel_cancel_workflow: need a limit of 1 to 10000'
            USING ERRCODE = '22023';
    END IF;
    -- The operator's cancel, on the workflow's row (first: a retry locks that row before
    -- anything else too), if a task has not ended
    IF p_before IS NULL THEN
        v_now := clock_timestamp();
        UPDATE "harel".workflows w SET cancelled_at = v_now
         WHERE w.id = p_id AND w.cancelled_at IS NULL
           AND EXISTS (SELECT 1 FROM "harel".workflow_tasks t
                        WHERE t.workflow_id = p_id AND t.outcome IS NULL);
    END IF;
    -- The page (its tasks that ended are skipped below), and its jobs' groups, locked in
    -- group order first (as settles take theirs: a settle of one of these tasks and this cancel
    -- never wait for each other in a cycle)
    SELECT array_agg(t.ordinal ORDER BY t.ordinal DESC),
           array_agg(t.job_id ORDER BY t.ordinal DESC),
           min(t.ordinal), count(*)::int
      INTO v_ordinals, v_jobs, v_last, v_seen
      FROM (SELECT x.ordinal, x.job_id FROM "harel".workflow_tasks x
             WHERE x.workflow_id = p_id
               AND x.ordinal < COALESCE(p_before, 2147483647)
             ORDER BY x.ordinal DESC
             LIMIT p_limit) AS t;
    IF v_jobs IS NULL THEN
        RETURN QUERY SELECT 0, 0, NULL::int;
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT g.group_id) INTO v_groups
      FROM unnest(v_jobs) AS j(id)
     CROSS JOIN LATERAL (
            SELECT COALESCE(
                (SELECT t.group_id FROM "harel".transport_groups t
                  WHERE t.group_id = 'own:' || lpad(j.id::text, 19, '0') AND t.inline_seq = j.id),
                (SELECT m.group_id FROM "harel".transport_messages m WHERE m.seq = j.id),
                (SELECT t.group_id FROM "harel".transport_groups t
                  WHERE t.inline_seq = j.id
                    AND t.group_id <> 'own:' || lpad(t.inline_seq::text, 19, '0')))
                   AS group_id) AS g
     WHERE g.group_id IS NOT NULL;
    IF v_groups IS NOT NULL THEN
        PERFORM 1 FROM "harel".transport_groups g
         WHERE g.group_id = ANY (v_groups)
         ORDER BY g.group_id
           FOR NO KEY UPDATE;
    END IF;

    FOR i IN 1..cardinality(v_jobs) LOOP
        -- (read again: an earlier cancel of this call may have ended it)
        CONTINUE WHEN (SELECT t.outcome FROM "harel".workflow_tasks t
                        WHERE t.workflow_id = p_id AND t.ordinal = v_ordinals[i]) IS NOT NULL;
        v_outcome := "harel".harel_cancel(v_jobs[i], p_reason, p_keep_ms);
        IF v_outcome = 'cancelled' THEN
            v_cancelled := v_cancelled + 1;
        ELSIF v_outcome = 'requested' THEN
            v_requested := v_requested + 1;
        END IF;
    END LOOP;
    RETURN QUERY SELECT v_cancelled, v_requested,
                        CASE WHEN v_seen = p_limit AND v_last > 1 THEN v_last END;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_cancel_workflow(BIGINT, TEXT, BIGINT, INT, INT) FROM PUBLIC;
