-- harel_retry_tasks: enqueues again tasks of one workflow that ended (ADR 0033, ADR 0040):
-- the tasks asked for, and with them the tasks downstream that their retry brings back.
-- The one implementation of a task's retry. Internal: called by harel_retry_workflow (every
-- task that failed) and harel_retry_dead_letters (the tasks whose dead letters it retries),
-- each holding the workflow's row (FOR UPDATE), so that two retries of one workflow run one
-- after the other.
--
-- Takes:
--   p_id     the workflow's id (its row locked by the caller)
--   p_seeds  the ordinals of the tasks to retry, or NULL for every task that became a dead
--            letter or was cancelled; a task that has not ended, or completed, is left as
--            it is
-- Returns one row per task enqueued again, in ordinal order (parents first): ordinal,
--   old_job (the task's job until now), new_job.
-- Fence: the caller's lock of the workflow's row; each seed only if it ended dead or
--   cancelled. With the seeds, in ordinal order, each task downstream of a task retried
--   here (one of its parents):
--   - cancelled, not running after failure, every parent of it that failed (dead,
--     cancelled) retried here: it was cancelled for them;
--   - running whatever its parents' outcomes (a callback) and ended: it counted an end the
--     retry takes back, and runs again with the new counts.
--   (A task released and not ended yet keeps the counts it was released with.)
--   Each is enqueued anew (harel_publish: a new job id) with its kind, payload, priority,
--   queue and fairness key, in its named group (a job of a group of its own gets a new
--   one), taken from its dead letter (deleted: not retried twice), its job in job_history,
--   or, for a callback, its row of workflow_reruns; it waits for its parents whose current
--   jobs have not ended (queued, or retried just before it), and its counts start from
--   those that have, so a callback counts every parent. The task points at the new job,
--   its outcome cleared; the workflow's counts are corrected (a negative row of
--   workflow_ends) and its cancel cleared. A task still waiting that had counted a
--   retried task's end waits for the new job instead, the end taken back from its counts.
-- Locks: harel_publish's and harel_hold's (the new jobs wait only for parents queued or
--   enqueued here: harel_hold releases none at once unless a parent ended meanwhile);
--   then the job_waits rows of the tasks that wait for retried ones, in job order, and no
--   row after them.
-- Indexes: workflow_tasks' key (workflow_id, ordinal) from the first seed; its unique
--   (workflow_id, name) for a task's parents; workflow_reruns' key; the keys of
--   dead_letters, job_history and job_waits.
-- Errors: HJ003 for a task to retry whose job is no longer kept (its dead letter purged,
--   its cancelled job pruned) and of which no copy is kept: the job's id in DETAIL (a
--   callback of which nothing is kept is left as it ended instead); harel_publish's.
--
-- Steps:
--   1. One walk of the workflow's tasks from the first seed, in ordinal order; each task
--      taken as above (a parent "retried here" has a job at least as new as the first
--      job enqueued here: a task's job changes only under the workflow's lock) and
--      retried at once, so that its dependents see it.
--   2. The workflow's counts corrected, its cancel cleared.
--   3. The waiting tasks that counted a retried task's end, in job order.
CREATE OR REPLACE FUNCTION "harel".harel_retry_tasks(
    p_id    BIGINT,
    p_seeds INT[]
) RETURNS TABLE (ordinal INT, old_job BIGINT, new_job BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_min        INT;
    v_first_new  BIGINT;
    v_job        RECORD;
    v_parents    BIGINT[];
    v_retried    INT;
    v_failed     INT;
    v_completed  INT;
    v_dead       INT;
    v_cancelled  INT;
    v_new        BIGINT;
    v_waits      BOOLEAN;
    v_now        TIMESTAMPTZ;
    v_ords       INT[] := ARRAY[]::int[];
    v_names      TEXT[] := ARRAY[]::text[];
    v_old_jobs   BIGINT[] := ARRAY[]::bigint[];
    v_new_jobs   BIGINT[] := ARRAY[]::bigint[];
    v_outcomes   TEXT[] := ARRAY[]::text[];
    -- the workflow's counts: what the retried tasks' ends had added, taken back
    v_ended_back INT := 0;
    v_failed_back INT := 0;
    v_cancelled_back INT := 0;
    s            RECORD;
BEGIN
    IF p_seeds IS NULL THEN
        v_min := 1;
    ELSE
        SELECT min(x.ord) INTO v_min FROM unnest(p_seeds) AS x(ord);
        IF v_min IS NULL THEN
            RETURN;
        END IF;
    END IF;

    -- The candidates, in ordinal order (parents first): the seeds, the cancelled, and the
    -- callbacks that ended (the seeds by a hash join, not an array search per task)
    FOR s IN SELECT t.ordinal, t.name, t.parents, t.outcome, t.run_after_failure, t.job_id,
                    (p_seeds IS NULL AND t.outcome IN ('dead', 'cancelled'))
                        OR z.ord IS NOT NULL AS seed
               FROM "harel".workflow_tasks t
               LEFT JOIN (SELECT DISTINCT x.ord FROM unnest(p_seeds) AS x(ord)) AS z
                 ON z.ord = t.ordinal
              WHERE t.workflow_id = p_id AND t.ordinal >= v_min
                AND t.outcome IS NOT NULL
                AND (z.ord IS NOT NULL OR t.outcome = 'cancelled' OR t.run_after_failure
                     OR (p_seeds IS NULL AND t.outcome = 'dead'))
              ORDER BY t.ordinal LOOP
        CONTINUE WHEN s.seed AND s.outcome = 'completed';
        -- (a task downstream of none retried yet)
        CONTINUE WHEN NOT s.seed AND v_first_new IS NULL;
        -- Its parents, by their key, in one read: how many were retried here (their jobs
        -- enqueued here: a task's job changes only under the workflow's lock) and how many
        -- failed and stay so; the ones it would wait for (their current jobs have not
        -- ended: queued, or retried just before it; a task that does not run after
        -- failure waits for a failed one too, and is cancelled by it, as when it was
        -- enqueued); and the others' outcomes, its counts to start from.
        SELECT count(*) FILTER (WHERE f.job_id >= v_first_new)::int,
               count(*) FILTER (WHERE f.outcome IN ('dead', 'cancelled'))::int,
               array_agg(f.job_id ORDER BY f.ordinal)
                   FILTER (WHERE f.outcome IS NULL
                              OR (NOT s.run_after_failure AND f.outcome <> 'completed')),
               count(*) FILTER (WHERE f.outcome = 'completed')::int,
               count(*) FILTER (WHERE f.outcome = 'dead' AND s.run_after_failure)::int,
               count(*) FILTER (WHERE f.outcome = 'cancelled' AND s.run_after_failure)::int
          INTO v_retried, v_failed, v_parents, v_completed, v_dead, v_cancelled
          FROM "harel".workflow_tasks f
         WHERE f.workflow_id = p_id AND f.name = ANY (s.parents);
        IF NOT s.seed THEN
            -- downstream of a task retried here: a callback that ended, or a task cancelled
            -- for the tasks retried here (no failed parent left)
            CONTINUE WHEN COALESCE(v_retried, 0) = 0;
            CONTINUE WHEN NOT s.run_after_failure
                          AND (s.outcome <> 'cancelled' OR v_failed > 0);
        END IF;

        -- what its job was enqueued with
        v_job := NULL;
        IF s.outcome = 'dead' THEN
            DELETE FROM "harel".dead_letters d WHERE d.id = s.job_id
            RETURNING d.group_id, d.kind, d.payload, d.priority, d.queue, d.trace_context,
                      d.fair_key INTO v_job;
        ELSE
            SELECT h.group_id, h.kind, h.payload, h.priority, h.queue,
                   NULL::text AS trace_context, h.fair_key
              INTO v_job
              FROM "harel".job_history h WHERE h.id = s.job_id;
        END IF;
        IF v_job.kind IS NULL AND s.run_after_failure THEN
            SELECT r.group_id, r.kind, r.payload, r.priority, r.queue,
                   NULL::text AS trace_context, r.fair_key
              INTO v_job
              FROM "harel".workflow_reruns r
             WHERE r.workflow_id = p_id AND r.ordinal = s.ordinal;
        END IF;
        IF v_job.kind IS NULL THEN
            -- (a callback enqueued before workflow_reruns, its job not kept: as it ended)
            CONTINUE WHEN s.run_after_failure AND NOT s.seed;
            RAISE EXCEPTION 'harel_retry_tasks: task % of workflow % cannot be retried: its job % is no longer kept',
                s.name, p_id, s.job_id
                USING ERRCODE = 'HJ003', DETAIL = s.job_id::text;
        END IF;

        SELECT p.s INTO v_new
          FROM "harel".harel_publish(
                   ARRAY[CASE WHEN v_job.group_id ~ '^own:[0-9]{19}$' THEN NULL
                              ELSE v_job.group_id END],
                   ARRAY[v_job.kind], ARRAY[v_job.payload::text], ARRAY[v_job.priority],
                   ARRAY[NULL::timestamptz], ARRAY[NULL::bigint], NULL, NULL,
                   ARRAY[v_job.queue], ARRAY[v_job.trace_context], ARRAY[v_job.fair_key],
                   CASE WHEN v_parents IS NOT NULL
                        THEN array_fill(1, ARRAY[cardinality(v_parents)]) END,
                   v_parents, ARRAY[s.run_after_failure]) AS p(s);
        IF v_first_new IS NULL THEN
            v_first_new := v_new;
        END IF;
        -- its counts start from the parents it does not wait for (its job_waits row: a
        -- new row, of this transaction)
        v_waits := false;
        IF v_parents IS NOT NULL THEN
            UPDATE "harel".job_waits w
               SET completed = w.completed + v_completed, dead = w.dead + v_dead,
                   cancelled = w.cancelled + v_cancelled
             WHERE w.job_id = v_new;
            v_waits := FOUND;
            IF NOT v_waits THEN
                -- released at once (a parent ended meanwhile): its counts are all of them
                SELECT count(*) FILTER (WHERE f.outcome = 'completed')::int,
                       count(*) FILTER (WHERE f.outcome = 'dead')::int,
                       count(*) FILTER (WHERE f.outcome = 'cancelled')::int
                  INTO v_completed, v_dead, v_cancelled
                  FROM "harel".workflow_tasks f
                 WHERE f.workflow_id = p_id AND f.name = ANY (s.parents);
            END IF;
        END IF;
        -- the task points at the new job; a task released at once keeps its counts (NULL
        -- for a task without parents)
        UPDATE "harel".workflow_tasks t
           SET job_id = v_new, outcome = NULL, ended_at = NULL,
               completed = CASE WHEN NOT v_waits AND cardinality(s.parents) > 0
                                THEN v_completed END,
               dead = CASE WHEN NOT v_waits AND cardinality(s.parents) > 0 THEN v_dead END,
               cancelled = CASE WHEN NOT v_waits AND cardinality(s.parents) > 0
                                THEN v_cancelled END
         WHERE t.workflow_id = p_id AND t.ordinal = s.ordinal;
        v_ended_back := v_ended_back + 1;
        v_failed_back := v_failed_back + (s.outcome <> 'completed')::int;
        v_cancelled_back := v_cancelled_back + (s.outcome = 'cancelled')::int;
        v_ords := v_ords || s.ordinal;
        v_names := v_names || s.name;
        v_old_jobs := v_old_jobs || s.job_id;
        v_new_jobs := v_new_jobs || v_new;
        v_outcomes := v_outcomes || s.outcome;
        -- (a job cancelled at once, by a parent that failed meanwhile, ended before its
        -- task pointed at it: its end recorded here)
        IF NOT v_waits AND v_parents IS NOT NULL
           AND EXISTS (SELECT 1 FROM "harel".job_history h
                        WHERE h.id = v_new AND h.state = 'cancelled') THEN
            v_now := clock_timestamp();
            UPDATE "harel".workflow_tasks t SET outcome = 'cancelled', ended_at = v_now
             WHERE t.workflow_id = p_id AND t.ordinal = s.ordinal;
            v_ended_back := v_ended_back - 1;
            v_failed_back := v_failed_back - 1;
            v_cancelled_back := v_cancelled_back - 1;
        END IF;
    END LOOP;
    IF cardinality(v_ords) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO "harel".workflow_ends (workflow_id, ended, failed, cancelled)
    VALUES (p_id, -v_ended_back, -v_failed_back, -v_cancelled_back);
    UPDATE "harel".workflows w SET cancelled_at = NULL
     WHERE w.id = p_id AND w.cancelled_at IS NOT NULL;

    -- Tasks still waiting that had counted a retried task's end: they wait for its new job
    -- now, the end taken back from their counts. Each under its job_waits row's lock, in
    -- job order (as a settle resolving them takes it), before its dependency rows; no row
    -- is locked after these. (The tasks retried here wait for the new jobs already: their
    -- jobs are the new ones; a task released meanwhile keeps what it was released with.)
    FOR s IN SELECT t.job_id, array_agg(r.job) AS parents,
                    count(*) FILTER (WHERE r.outcome = 'completed')::int AS n_completed,
                    count(*) FILTER (WHERE r.outcome = 'dead')::int AS n_dead,
                    count(*) FILTER (WHERE r.outcome = 'cancelled')::int AS n_cancelled
               FROM "harel".workflow_tasks t
              CROSS JOIN LATERAL unnest(t.parents) AS p(name)
               JOIN unnest(v_names, v_new_jobs, v_outcomes) AS r(name, job, outcome)
                 ON r.name = p.name
              WHERE t.workflow_id = p_id AND t.outcome IS NULL AND t.job_id < v_first_new
              GROUP BY t.job_id
              ORDER BY t.job_id LOOP
        UPDATE "harel".job_waits w
           SET waiting = w.waiting + cardinality(s.parents),
               completed = w.completed - s.n_completed,
               dead = w.dead - s.n_dead, cancelled = w.cancelled - s.n_cancelled
         WHERE w.job_id = s.job_id;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO "harel".job_dependencies (parent_id, job_id)
        SELECT p.job, s.job_id FROM unnest(s.parents) AS p(job);
    END LOOP;

    RETURN QUERY
    SELECT x.ord, x.old_job, x.new_job
      FROM unnest(v_ords, v_old_jobs, v_new_jobs) AS x(ord, old_job, new_job);
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_retry_tasks(BIGINT, INT[]) FROM PUBLIC;
