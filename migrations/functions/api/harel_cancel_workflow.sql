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
-- Fence: harel_cancel's, per task: a task that ended meanwhile is left as it ended.
--   Steps are cancelled from the last to the first, so that each gets p_reason rather
--   than the reason its cancelled parent would give it.
-- Locks: harel_cancel's (each task's group row, waiting).
-- Indexes: workflow_tasks' key (workflow_id, ordinal), backward from p_before.
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
AS $$
#variable_conflict use_column
DECLARE
    v_cancelled INT := 0;
    v_requested INT := 0;
    v_last      INT;
    v_seen      INT := 0;
    v_outcome   TEXT;
    s           RECORD;
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'harel_cancel_workflow: need a limit of 1 to 10000'
            USING ERRCODE = '22023';
    END IF;
    FOR s IN SELECT t.ordinal, t.job_id FROM "harel".workflow_tasks t
              WHERE t.workflow_id = p_id
                AND t.ordinal < COALESCE(p_before, 2147483647)
              ORDER BY t.ordinal DESC
              LIMIT p_limit LOOP
        v_seen := v_seen + 1;
        v_last := s.ordinal;
        -- (read again: an earlier cancel of this call may have ended it)
        CONTINUE WHEN (SELECT t.outcome FROM "harel".workflow_tasks t
                        WHERE t.workflow_id = p_id AND t.ordinal = s.ordinal) IS NOT NULL;
        v_outcome := "harel".harel_cancel(s.job_id, p_reason, p_keep_ms);
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
