-- harel_job_workflow: the workflow task a job is, if it is one (ADR 0040): what `jobs show`,
-- `dead show` and the dashboard's job and dead-letter pages say of a task's job. An
-- operator's entry point.
--
-- Takes:
--   p_id  the job's id
-- Returns one row, or none when the job is no workflow task's current job (a job of no
--   workflow, or one a retry of its task replaced): workflow_id, workflow (its name), task
--   (the task's name), completed, dead, cancelled (its parents' outcomes, once released;
--   NULL before, or without parents).
-- Fence: none: it reads.
-- Locks: none.
-- Indexes: workflow_tasks_by_job; workflows' key.
-- Errors: none of its own.
CREATE OR REPLACE FUNCTION @schema@.harel_job_workflow(p_id BIGINT)
RETURNS TABLE (
    workflow_id BIGINT,
    workflow    TEXT,
    task        TEXT,
    completed   INT,
    dead        INT,
    cancelled   INT
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
    SELECT s.workflow_id, w.name, s.name, s.completed, s.dead, s.cancelled
      FROM @schema@.workflow_tasks s
      JOIN @schema@.workflows w ON w.id = s.workflow_id
     WHERE s.job_id = p_id;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_job_workflow(BIGINT) FROM PUBLIC;
