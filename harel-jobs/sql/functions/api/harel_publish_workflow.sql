-- harel_publish_workflow: enqueues a workflow (ADR 0033): jobs, each a named task that may
-- wait for earlier tasks, recorded under one new workflow id, in one round trip. A
-- producer's entry point.
--
-- Takes:
--   p_name      the workflow's name, 1 to 255 bytes (not unique: a kind of workflow)
--   p_steps     per job, its task name: 1 to 255 bytes, unique in the workflow
--   then harel_publish's arrays, one element per job, and its dependencies: each
--   p_after element must name an earlier job of the call (-its position): a task waits
--   only for tasks. No unique keys (a task's job is the workflow's own).
-- Returns one row per task, in input order: the workflow's id and the task's job id.
-- Fence: what harel_publish checks; the task names and the dependencies checked here.
-- Locks: harel_publish's; the new workflow's rows.
-- Indexes: workflows', workflow_tasks' and workflow_reruns' keys (new rows).
-- Errors: 22023 for a name or task name out of range, a repeated task name, arrays of
--   different lengths, unique keys, or a dependency on a job id; harel_publish's.
--
-- Steps:
--   1. Check the name, the task names and the dependencies.
--   2. harel_publish: the jobs, pending where they wait for parents.
--   3. The workflow row, and one workflow_tasks row per job: its ordinal, job id and
--      parents' names; for each task that runs whatever its parents' outcomes (a
--      callback), a row of workflow_reruns: what its job was enqueued with, so that a retry
--      can run it again (ADR 0040).
CREATE OR REPLACE FUNCTION @schema@.harel_publish_workflow(
    p_name           TEXT,
    p_steps          TEXT[],
    p_groups         TEXT[],
    p_kinds          TEXT[],
    p_payloads       TEXT[],
    p_priorities     SMALLINT[],
    p_not_before     TIMESTAMPTZ[],
    p_delay_ms       BIGINT[],
    p_queues         TEXT[],
    p_trace_contexts TEXT[],
    p_fair_keys      TEXT[],
    p_after_of       INT[],
    p_after          BIGINT[],
    p_run_after_failure BOOLEAN[]
) RETURNS TABLE (workflow_id BIGINT, job_id BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_count INT := cardinality(p_steps);
    v_jobs  BIGINT[];
    v_id    BIGINT;
BEGIN
    IF p_name IS NULL OR octet_length(p_name) NOT BETWEEN 1 AND 255
       OR v_count IS NULL OR v_count = 0
       OR cardinality(p_groups) IS DISTINCT FROM v_count
       OR EXISTS (SELECT 1 FROM unnest(p_steps) AS s(name)
                   WHERE s.name IS NULL OR octet_length(s.name) NOT BETWEEN 1 AND 255)
       OR (SELECT count(DISTINCT s.name) FROM unnest(p_steps) AS s(name)) <> v_count THEN
        RAISE EXCEPTION 'harel_publish_workflow: a workflow has a name of 1 to 255 bytes and tasks named so, each name once, one per job'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_after) AS a(parent) WHERE a.parent IS NULL OR a.parent > 0) THEN
        RAISE EXCEPTION 'harel_publish_workflow: a task waits only for earlier tasks of its workflow'
            USING ERRCODE = '22023';
    END IF;

    SELECT array_agg(p.s ORDER BY p.ord) INTO v_jobs
      FROM @schema@.harel_publish(p_groups, p_kinds, p_payloads, p_priorities, p_not_before,
                                  p_delay_ms, NULL, NULL, p_queues, p_trace_contexts,
                                  p_fair_keys, p_after_of, p_after, p_run_after_failure)
           WITH ORDINALITY AS p(s, ord);

    -- (settles record tasks' outcomes from now on: see dependents_seen in migration 0015)
    IF pg_sequence_last_value('@schema@.dependents_seen'::regclass) IS NULL THEN
        PERFORM nextval('@schema@.dependents_seen');
    END IF;
    INSERT INTO @schema@.workflows (name, tasks) VALUES (p_name, v_count)
    RETURNING id INTO v_id;
    INSERT INTO @schema@.workflow_tasks
           (workflow_id, name, ordinal, job_id, parents, run_after_failure)
    SELECT v_id, x.name, x.ord, v_jobs[x.ord], COALESCE(e.parents, ARRAY[]::text[]),
           COALESCE(p_run_after_failure[x.ord], false)
      FROM unnest(p_steps) WITH ORDINALITY AS x(name, ord)
      -- (each task's parents aggregated once, then a hash join: linear in the workflow)
      LEFT JOIN (SELECT d.waiter, array_agg(p_steps[-d.parent] ORDER BY -d.parent) AS parents
                   FROM unnest(p_after_of, p_after) AS d(waiter, parent)
                  GROUP BY d.waiter) AS e ON e.waiter = x.ord;
    -- the callbacks' copies (none for a workflow without one)
    INSERT INTO @schema@.workflow_reruns
           (workflow_id, ordinal, group_id, kind, payload, priority, queue, fair_key)
    SELECT v_id, x.ord, p_groups[x.ord], p_kinds[x.ord], p_payloads[x.ord]::json,
           p_priorities[x.ord], p_queues[x.ord], p_fair_keys[x.ord]
      FROM unnest(p_run_after_failure) WITH ORDINALITY AS x(run, ord)
     WHERE x.run;

    RETURN QUERY SELECT v_id, j.id FROM unnest(v_jobs) AS j(id);
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_publish_workflow(
    TEXT, TEXT[], TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[], TEXT[], TEXT[],
    TEXT[], INT[], BIGINT[], BOOLEAN[])
    FROM PUBLIC;
