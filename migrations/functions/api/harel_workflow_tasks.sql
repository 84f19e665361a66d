-- harel_workflow_tasks: a page of a workflow's tasks, in their order, each with its job's
-- state (ADR 0033). An operator's entry point (the CLI, the dashboard).
--
-- Takes:
--   p_id     the workflow's id
--   p_after  the cursor: tasks after this ordinal (NULL or 0: from the first)
--   p_limit  1 to 1,000
-- Returns at most p_limit tasks in ordinal order: ordinal, name, job_id, state (the
--   recorded outcome of an ended task: 'completed', 'dead' or 'cancelled'; else the job's
--   queued state as harel_job says, 'pending' for one that waits for its parents), kind,
--   attempts, last_error, parents (their task names), completed, dead and cancelled (its
--   parents' outcomes, once released), ended_at. A task whose job is neither queued nor
--   recorded as ended (a release before this one) reads 'unknown'.
-- Fence: none: it reads (harel_job per task, each its own snapshot: a task moving during
--   the call may show a state a moment older or newer than its neighbour's).
-- Locks: none.
-- Indexes: workflow_tasks' key (workflow_id, ordinal), a range from p_after; harel_job's
--   per task.
-- Errors: 22023 for a limit out of range.
CREATE OR REPLACE FUNCTION "harel".harel_workflow_tasks(
    p_id    BIGINT,
    p_after INT,
    p_limit INT
) RETURNS TABLE (
    ordinal   INT,
    name       TEXT,
    job_id     BIGINT,
    state      TEXT,
    kind       TEXT,
    attempts   INT,
    last_error TEXT,
    parents    TEXT[],
    completed  INT,
    dead       INT,
    cancelled  INT,
    ended_at   TIMESTAMPTZ
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    s RECORD;
    j RECORD;
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_workflow_tasks: need a limit of 1 to 1000' USING ERRCODE = '22023';
    END IF;
    -- (harel_job called per task from a statement of its own, not from a LATERAL beside
    -- workflow_tasks: on Citus a statement that reads the schema's tables runs whole on the
    -- worker node, where harel_job's own queries cannot run)
    FOR s IN SELECT t.* FROM "harel".workflow_tasks t
              WHERE t.workflow_id = p_id AND t.ordinal > COALESCE(p_after, 0)
              ORDER BY t.ordinal
              LIMIT p_limit LOOP
        j := NULL;
        SELECT h.state, h.kind, h.attempts, h.last_error INTO j
          FROM "harel".harel_job(s.job_id) AS h;
        ordinal := s.ordinal;
        name := s.name;
        job_id := s.job_id;
        state := COALESCE(s.outcome, j.state, 'unknown');
        kind := j.kind;
        attempts := j.attempts;
        last_error := j.last_error;
        parents := s.parents;
        completed := s.completed;
        dead := s.dead;
        cancelled := s.cancelled;
        ended_at := s.ended_at;
        RETURN NEXT;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_workflow_tasks(BIGINT, INT, INT) FROM PUBLIC;
