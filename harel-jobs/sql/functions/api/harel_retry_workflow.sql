-- harel_retry_workflow: enqueues again the tasks of a workflow that failed (became dead
-- letters or were cancelled), each waiting for its parents as it did (ADR 0033). An
-- operator's entry point.
--
-- Takes:
--   p_id  the workflow's id
-- Returns one row: retried (tasks enqueued again), or 0 when none had failed.
-- Fence: the workflow's row locked (FOR UPDATE) for the call: two retries of one workflow
--   run one after the other, and the second finds nothing left to retry. Each failed task,
--   in ordinal order (parents first), is enqueued anew (harel_publish: a new job id)
--   with its kind, payload, priority, queue and fairness key, in its named group (a job
--   of a group of its own gets a new one), waiting for its parents that have not
--   completed (their current jobs: queued, or retried just before it); its dead letter is
--   deleted (it is not retried twice); the task points at the new job, its outcome
--   cleared, the workflow's counts corrected (a negative row of workflow_ends). A task
--   still waiting that had counted a retried task's failure (it runs after failure) waits
--   for the new job instead, the failure taken back from its counts.
-- Locks: the workflow's row; harel_publish's and harel_hold's; the group rows of the tasks
--   that wait for retried ones, in one statement, in group order, then their job_waits
--   rows, in job order (ADR 0037).
-- Indexes: workflow_tasks' key; the keys of dead_letters and job_history.
-- Errors: HJ003 for a failed task whose job is no longer kept (its dead letter purged or
--   its cancelled job pruned: the task's id in DETAIL); harel_publish's.
CREATE OR REPLACE FUNCTION @schema@.harel_retry_workflow(p_id BIGINT)
RETURNS TABLE (retried INT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_retried INT := 0;
    v_job     RECORD;
    v_parents BIGINT[];
    v_new     BIGINT;
    v_names   TEXT[] := ARRAY[]::text[];
    v_new_jobs BIGINT[] := ARRAY[]::bigint[];
    v_old_outcomes TEXT[] := ARRAY[]::text[];
    s         RECORD;
BEGIN
    PERFORM 1 FROM @schema@.workflows w WHERE w.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    FOR s IN SELECT t.* FROM @schema@.workflow_tasks t
              WHERE t.workflow_id = p_id AND t.outcome IN ('dead', 'cancelled')
              ORDER BY t.ordinal LOOP
        v_job := NULL;
        IF s.outcome = 'dead' THEN
            DELETE FROM @schema@.dead_letters d WHERE d.id = s.job_id
            RETURNING d.group_id, d.kind, d.payload, d.priority, d.queue, d.trace_context,
                      d.fair_key INTO v_job;
        ELSE
            SELECT h.group_id, h.kind, h.payload, h.priority, h.queue,
                   NULL::text AS trace_context, h.fair_key
              INTO v_job
              FROM @schema@.job_history h WHERE h.id = s.job_id;
        END IF;
        IF v_job.kind IS NULL THEN
            RAISE EXCEPTION 'harel_retry_workflow: task % of workflow % cannot be retried: its job % is no longer kept',
                s.name, p_id, s.job_id
                USING ERRCODE = 'HJ003', DETAIL = s.job_id::text;
        END IF;
        -- its parents' current jobs that have not completed (read now: a parent retried
        -- just before it points at its new job)
        SELECT array_agg(t.job_id ORDER BY t.ordinal) INTO v_parents
          FROM @schema@.workflow_tasks t
         WHERE t.workflow_id = p_id AND t.name = ANY (s.parents)
           AND t.outcome IS DISTINCT FROM 'completed';
        SELECT p.s INTO v_new
          FROM @schema@.harel_publish(
                   ARRAY[CASE WHEN v_job.group_id ~ '^own:[0-9]{19}$' THEN NULL
                              ELSE v_job.group_id END],
                   ARRAY[v_job.kind], ARRAY[v_job.payload::text], ARRAY[v_job.priority],
                   ARRAY[NULL::timestamptz], ARRAY[NULL::bigint], NULL, NULL,
                   ARRAY[v_job.queue], ARRAY[v_job.trace_context], ARRAY[v_job.fair_key],
                   CASE WHEN v_parents IS NOT NULL
                        THEN array_fill(1, ARRAY[cardinality(v_parents)]) END,
                   v_parents, ARRAY[s.run_after_failure]) AS p(s);
        UPDATE @schema@.workflow_tasks t
           SET job_id = v_new, outcome = NULL, ended_at = NULL,
               completed = NULL, dead = NULL, cancelled = NULL
         WHERE t.workflow_id = p_id AND t.ordinal = s.ordinal;
        v_retried := v_retried + 1;
        v_names := v_names || s.name;
        v_new_jobs := v_new_jobs || v_new;
        v_old_outcomes := v_old_outcomes || s.outcome;
    END LOOP;
    IF v_retried = 0 THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    INSERT INTO @schema@.workflow_ends (workflow_id, ended, failed)
    VALUES (p_id, -v_retried, -v_retried);

    -- Tasks still waiting that had counted a retried task's failure (they run after
    -- failure): they wait for its new job now, the failure taken back from their counts.
    -- Their groups locked first, in one statement, in group order, then each job_waits
    -- row in job order, as a settle resolving them takes them (ADR 0037: every writer of a
    -- job_waits row holds its job's group first). (The tasks retried here wait for the new
    -- jobs already; a task released meanwhile keeps what it was released with.)
    PERFORM 1 FROM @schema@.transport_groups g
     WHERE g.group_id = ANY (ARRAY(
               SELECT w.group_id
                 FROM @schema@.workflow_tasks t
                 JOIN @schema@.job_waits w ON w.job_id = t.job_id
                WHERE t.workflow_id = p_id AND t.outcome IS NULL
                  AND t.parents && v_names))
     ORDER BY g.group_id
       FOR NO KEY UPDATE;
    FOR s IN SELECT t.job_id, array_agg(r.job) AS parents,
                    count(*) FILTER (WHERE r.outcome = 'dead')::int AS n_dead,
                    count(*) FILTER (WHERE r.outcome = 'cancelled')::int AS n_cancelled
               FROM @schema@.workflow_tasks t
              CROSS JOIN LATERAL unnest(t.parents) AS p(name)
               JOIN unnest(v_names, v_new_jobs, v_old_outcomes) AS r(name, job, outcome)
                 ON r.name = p.name
              WHERE t.workflow_id = p_id AND t.outcome IS NULL
                AND NOT EXISTS (SELECT 1 FROM unnest(v_new_jobs) AS n(job) WHERE n.job = t.job_id)
              GROUP BY t.job_id
              ORDER BY t.job_id LOOP
        UPDATE @schema@.job_waits w
           SET waiting = w.waiting + cardinality(s.parents),
               dead = w.dead - s.n_dead, cancelled = w.cancelled - s.n_cancelled
         WHERE w.job_id = s.job_id;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO @schema@.job_dependencies (parent_id, job_id)
        SELECT p.job, s.job_id FROM unnest(s.parents) AS p(job);
    END LOOP;
    RETURN QUERY SELECT v_retried;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_retry_workflow(BIGINT) FROM PUBLIC;
