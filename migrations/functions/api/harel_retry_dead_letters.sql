-- harel_retry_dead_letters: deletes dead letters and publishes each again (same group, at
-- its end; kind, payload, priority, queue, trace context and fairness key), in id order. A
-- letter of a job without a group (its group named 'own:' and its old seq) goes back without
-- one, into a group of its own. A letter that is a workflow task's job is retried as that
-- task (harel_retry_tasks, as harel_retry_workflow retries it: the task points at the new
-- job, which waits for its parents that have not ended; the tasks cancelled for it and the
-- callbacks that counted it run again), so it stays in its workflow (ADR 0040). An
-- operator's entry point (DeadLetters::retry, the command line's `dead retry`, the
-- dashboard's Retry and Retry all).
--
-- (A function rather than one statement of the Rust side: on Citus a statement that touches
-- the schema's tables runs whole on the worker node, harel_publish with it, where the schema's
-- sequences do not exist. Here the DELETE is one statement and harel_publish is called from
-- another, that reads no table.)
--
-- Takes:
--   p_ids  the letters' ids
-- Returns: (old id, new id) for each letter found, in id order (a task's: the task's new
--   job; the other tasks its retry enqueued again are its workflow's to show).
-- Fence: the DELETE: two retries of one letter publish it once. A task's letter is retried
--   as the task under its workflow's row lock, if the task still points at that job and
--   ended dead (a retry of the workflow meanwhile took it).
-- Locks: the rows of the letters' workflows (FOR UPDATE, in id order, first: as
--   harel_retry_workflow takes its one), harel_retry_tasks'; then the other letters' rows
--   (deleted) and harel_publish's.
-- Indexes: workflow_tasks_by_job per letter; workflows' key; dead_letters' key;
--   harel_retry_tasks'.
-- Errors: harel_retry_tasks' (HJ003 cannot happen for a letter that exists) and
--   harel_publish's.
--
-- Steps:
--   1. The letters that are workflow tasks' jobs (read), their workflows' rows locked in
--      id order.
--   2. Per workflow, its tasks whose jobs are these letters and that ended dead (read
--      again, under the lock): harel_retry_tasks.
--   3. The other letters: deleted, and published again in one call.
CREATE OR REPLACE FUNCTION "harel".harel_retry_dead_letters(p_ids BIGINT[])
RETURNS TABLE (old_id BIGINT, new_id BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids        BIGINT[];
    v_groups     TEXT[];
    v_kinds      TEXT[];
    v_payloads   TEXT[];
    v_priorities SMALLINT[];
    v_queues     TEXT[];
    v_traces     TEXT[];
    v_fair_keys  TEXT[];
    v_n          INT;
    v_workflows  BIGINT[];
    v_seeds      INT[];
    v_seed_jobs  BIGINT[];
    v_task_old   BIGINT[] := ARRAY[]::bigint[];
    v_task_new   BIGINT[] := ARRAY[]::bigint[];
    v_old        BIGINT[];
    v_new        BIGINT[];
BEGIN
    -- 1. The letters that are workflow tasks' current jobs (each by workflow_tasks_by_job),
    -- their workflows locked first, in id order
    SELECT array_agg(DISTINCT t.workflow_id ORDER BY t.workflow_id) INTO v_workflows
      FROM unnest(p_ids) AS x(id)
     CROSS JOIN LATERAL (SELECT w.workflow_id FROM "harel".workflow_tasks w
                          WHERE w.job_id = x.id OFFSET 0) AS t;
    IF v_workflows IS NOT NULL THEN
        PERFORM 1 FROM "harel".workflows w
         WHERE w.id = ANY (v_workflows)
         ORDER BY w.id
           FOR UPDATE;
        -- 2. Per workflow, its tasks still on these letters (read again under the lock),
        -- each retried as harel_retry_workflow retries it
        FOR i IN 1..cardinality(v_workflows) LOOP
            SELECT array_agg(t.ordinal), array_agg(t.job_id) INTO v_seeds, v_seed_jobs
              FROM unnest(p_ids) AS x(id)
             CROSS JOIN LATERAL (SELECT w.ordinal, w.job_id FROM "harel".workflow_tasks w
                                  WHERE w.job_id = x.id AND w.workflow_id = v_workflows[i]
                                    AND w.outcome = 'dead'
                                 OFFSET 0) AS t;
            CONTINUE WHEN v_seeds IS NULL;
            -- (a statement of its own, reading no table: Citus, sql/README.md)
            SELECT array_agg(r.old_job), array_agg(r.new_job) INTO v_old, v_new
              FROM "harel".harel_retry_tasks(v_workflows[i], v_seeds) AS r;
            -- the letters' pairs (the other tasks it enqueued again are not letters asked for)
            SELECT v_task_old || COALESCE(array_agg(o.job), '{}'),
                   v_task_new || COALESCE(array_agg(o.new_job), '{}')
              INTO v_task_old, v_task_new
              FROM unnest(v_old, v_new) AS o(job, new_job)
             WHERE o.job = ANY (v_seed_jobs);
        END LOOP;
    END IF;

    -- 3. The other letters (those retried as tasks are deleted already)
    WITH d AS (
        DELETE FROM "harel".dead_letters l WHERE l.id = ANY (p_ids)
        RETURNING l.id, l.group_id, l.kind, l.payload, l.priority, l.queue, l.trace_context,
                  l.fair_key
    )
    SELECT array_agg(d.id ORDER BY d.id),
           array_agg(CASE WHEN d.group_id !~ '^own:[0-9]{19}$' THEN d.group_id END
                     ORDER BY d.id),
           array_agg(d.kind ORDER BY d.id),
           array_agg(d.payload::text ORDER BY d.id),
           array_agg(d.priority ORDER BY d.id),
           array_agg(d.queue ORDER BY d.id),
           array_agg(d.trace_context ORDER BY d.id),
           array_agg(d.fair_key ORDER BY d.id),
           count(*)::int
      INTO v_ids, v_groups, v_kinds, v_payloads, v_priorities, v_queues, v_traces,
           v_fair_keys, v_n
      FROM d;
    IF v_n = 0 THEN
        v_old := ARRAY[]::bigint[];
        v_new := ARRAY[]::bigint[];
    ELSE
        SELECT array_agg(v_ids[p.n]::bigint ORDER BY p.n), array_agg(p.s ORDER BY p.n)
          INTO v_old, v_new
          FROM "harel".harel_publish(
                   v_groups, v_kinds, v_payloads, v_priorities,
                   array_fill(NULL::timestamptz, ARRAY[v_n]),
                   array_fill(NULL::bigint, ARRAY[v_n]), NULL, NULL, v_queues, v_traces,
                   v_fair_keys)
               WITH ORDINALITY AS p (s, n);
    END IF;
    RETURN QUERY
    SELECT x.old_id, x.new_id
      FROM unnest(v_task_old || v_old, v_task_new || v_new) AS x(old_id, new_id)
     ORDER BY x.old_id;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_retry_dead_letters(BIGINT[]) FROM PUBLIC;
