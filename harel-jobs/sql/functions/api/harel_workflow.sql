-- harel_workflow: one workflow, by id (ADR 0033). An operator's entry point (the CLI, the
-- dashboard).
--
-- Takes:
--   p_id  the workflow's id
-- Returns one row, or none for an unknown id: id, name, created_at, tasks, ended (tasks
--   whose jobs have ended), failed (of those, dead or cancelled), cancelled (of those,
--   cancelled), cancelled_at (when an operator cancelled the workflow; NULL: not, or
--   retried since).
-- Fence: none: it reads.
-- Locks: none.
-- Indexes: workflows' key; workflow_ends_by_workflow.
-- Errors: none of its own.
CREATE OR REPLACE FUNCTION @schema@.harel_workflow(p_id BIGINT)
RETURNS TABLE (
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
    RETURN QUERY
    SELECT w.id, w.name, w.created_at, w.tasks, COALESCE(e.ended, 0), COALESCE(e.failed, 0),
               COALESCE(e.cancelled, 0), w.cancelled_at
      FROM @schema@.workflows w
      -- (its counts: the sum of its rows of workflow_ends, by their index)
      LEFT JOIN LATERAL (SELECT sum(x.ended)::int AS ended, sum(x.failed)::int AS failed,
                                  sum(x.cancelled)::int AS cancelled
                           FROM @schema@.workflow_ends x
                          WHERE x.workflow_id = w.id) AS e ON true
     WHERE w.id = p_id;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_workflow(BIGINT) FROM PUBLIC;
