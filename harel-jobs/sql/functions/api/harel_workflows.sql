-- harel_workflows: a page of workflows, newest first (ADR 0033). An operator's entry point
-- (the CLI, the dashboard).
--
-- Takes:
--   p_name    only workflows of this name, or NULL for all
--   p_before  the cursor: workflows with a smaller id (NULL: from the newest)
--   p_limit   1 to 1,000
-- Returns at most p_limit + 1 workflows, newest first: id, name, created_at, tasks, ended
--   (tasks whose jobs have ended), failed (of those, dead or cancelled), cancelled (of
--   those, cancelled), cancelled_at (when an operator cancelled it). A last row past
--   p_limit says more are left: the next page starts before the p_limit-th (its id as
--   p_before).
-- Fence: none: it reads. Bounded: at most p_limit + 1 rows read from one index.
-- Locks: none.
-- Indexes: workflows' key, backward; workflows_by_name, backward, for p_name;
--   workflow_ends_by_workflow per workflow shown.
-- Errors: 22023 for a limit out of range.
CREATE OR REPLACE FUNCTION @schema@.harel_workflows(
    p_name   TEXT,
    p_before BIGINT,
    p_limit  INT
) RETURNS TABLE (
    id         BIGINT,
    name       TEXT,
    created_at TIMESTAMPTZ,
    tasks      INT,
    ended      INT,
    failed     INT,
    cancelled  INT,
    cancelled_at TIMESTAMPTZ
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_workflows: need a limit of 1 to 1000' USING ERRCODE = '22023';
    END IF;
    -- (two statements, so that each is one index range in a generic plan)
    IF p_name IS NULL THEN
        RETURN QUERY
        SELECT w.id, w.name, w.created_at, w.tasks, COALESCE(e.ended, 0), COALESCE(e.failed, 0),
               COALESCE(e.cancelled, 0), w.cancelled_at
          FROM @schema@.workflows w
          -- (its counts: the sum of its rows of workflow_ends, by their index)
          LEFT JOIN LATERAL (SELECT sum(x.ended)::int AS ended, sum(x.failed)::int AS failed,
                                  sum(x.cancelled)::int AS cancelled
                               FROM @schema@.workflow_ends x
                              WHERE x.workflow_id = w.id) AS e ON true
         WHERE w.id < COALESCE(p_before, 9223372036854775807)
         ORDER BY w.id DESC
         LIMIT p_limit + 1;
    ELSE
        RETURN QUERY
        SELECT w.id, w.name, w.created_at, w.tasks, COALESCE(e.ended, 0), COALESCE(e.failed, 0),
               COALESCE(e.cancelled, 0), w.cancelled_at
          FROM @schema@.workflows w
          LEFT JOIN LATERAL (SELECT sum(x.ended)::int AS ended, sum(x.failed)::int AS failed,
                                  sum(x.cancelled)::int AS cancelled
                               FROM @schema@.workflow_ends x
                              WHERE x.workflow_id = w.id) AS e ON true
         WHERE w.name = p_name AND w.id < COALESCE(p_before, 9223372036854775807)
         ORDER BY w.name DESC, w.id DESC
         LIMIT p_limit + 1;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_workflows(TEXT, BIGINT, INT) FROM PUBLIC;
