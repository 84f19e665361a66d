-- harel_retry_workflow: enqueues again the tasks of a workflow that failed (became dead
-- letters or were cancelled), each waiting for its parents as it did, and runs again the
-- callbacks that counted their failures (ADR 0033, ADR 0040). An operator's entry point.
--
-- Takes:
--   p_id  the workflow's id
-- Returns one row: retried (tasks enqueued again, callbacks run again included), or 0 when
--   none had failed.
-- Fence: the workflow's row locked (FOR UPDATE) for the call: two retries of one workflow
--   (this one, a retry of its tasks' dead letters) run one after the other, and the second
--   finds nothing left to retry. What is retried, and how: harel_retry_tasks, the one
--   implementation of a task's retry (every task that failed, parents first; the
--   callbacks downstream that ended; the tasks waiting for them re-linked; the workflow's
--   counts corrected and its cancel cleared).
-- Locks: the workflow's row, first; then harel_retry_tasks'.
-- Indexes: workflows' key; harel_retry_tasks'.
-- Errors: HJ003 for a failed task whose job is no longer kept (its dead letter purged or
--   its cancelled job pruned: the job's id in DETAIL), nothing enqueued; harel_publish's.
CREATE OR REPLACE FUNCTION "harel".harel_retry_workflow(p_id BIGINT)
RETURNS TABLE (retried INT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_retried INT;
BEGIN
    PERFORM 1 FROM "harel".workflows w WHERE w.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    -- (a statement of its own, reading no table: on Citus a statement that reads the
    -- schema's tables runs on the worker node, where a queue function cannot run)
    SELECT count(*)::int INTO v_retried FROM "harel".harel_retry_tasks(p_id, NULL);
    RETURN QUERY SELECT v_retried;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_retry_workflow(BIGINT) FROM PUBLIC;
