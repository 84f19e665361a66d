-- harel_workflow_task: what a running job's handler may know of its workflow (ADR 0033):
-- the workflow, its task, and its parents' outcomes (a batch's callback reads its counts
-- here). A worker's entry point (JobContext::workflow).
--
-- Takes the lease, as harel_extend does:
--   p_group, p_seq, p_token  the job's group, id and lease token
-- Returns one row, or none when the job is no workflow's task or the lease is not this
--   token's at this job: workflow_id, workflow (its name), task (the task's name),
--   completed, dead, cancelled (its parents' outcomes, when it was released; NULL for a
--   task without parents).
-- Fence: only the lease holder reads (the group leased to p_token at p_seq).
-- Locks: none.
-- Indexes: transport_groups' key; workflow_tasks_by_job; workflows' key.
-- Errors: none of its own.
CREATE OR REPLACE FUNCTION "harel".harel_workflow_task(
    p_group TEXT,
    p_seq   BIGINT,
    p_token UUID
) RETURNS TABLE (
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
      FROM "harel".transport_groups g
      JOIN "harel".workflow_tasks s ON s.job_id = p_seq
      JOIN "harel".workflows w ON w.id = s.workflow_id
     WHERE g.group_id = p_group AND g.locked_by = p_token AND g.head_seq = p_seq;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_workflow_task(TEXT, BIGINT, UUID) FROM PUBLIC;
