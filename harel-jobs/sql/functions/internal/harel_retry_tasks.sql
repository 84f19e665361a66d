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
--   Each is enqueued anew with its kind, payload, priority, queue and fairness key, in its
--   named group (a job of a group of its own gets a new one), taken from its dead letter
--   (deleted: not retried twice), its job in job_history, or, for a callback, its row of
--   workflow_reruns; it waits for its parents whose current jobs have not ended (queued,
--   or retried in this call), and its counts start from those that have, so a callback
--   counts every parent. The task points at the new job, its outcome cleared; the
--   workflow's counts are corrected (a negative row of workflow_ends) and its cancel
--   cleared. A task still waiting that had counted a retried task's end waits for the new
--   job instead, the end taken back from its counts.
-- Locks: the chosen tasks' rows; harel_publish's and harel_hold's (the new jobs wait only
--   for parents queued or enqueued here: harel_hold releases none at once unless a parent
--   ended meanwhile); then the group rows of the tasks that wait for retried ones, in one
--   statement, in group order, and their job_waits rows, in job order, and no row after
--   them (ADR 0037).
-- Indexes: workflow_tasks' key (workflow_id, ordinal) from the first seed, and its whole
--   range once (the edges of the chosen tasks); its unique (workflow_id, name) for the
--   parents of a task of up to 32 (more: the range again); workflow_reruns' key; the keys
--   of dead_letters, job_history and job_waits. A call reads the workflow's tasks a few
--   times over: it costs in proportion to the workflow, not to the queue.
-- Errors: HJ003 for a task to retry whose job is no longer kept (its dead letter purged,
--   its cancelled job pruned) and of which no copy is kept: the job's id in DETAIL (a
--   callback of which nothing is kept is left as it ended instead); harel_publish's.
--
-- Steps:
--   1. One walk of the workflow's tasks from the first seed, in ordinal order, choosing
--      as above; a chosen task is marked at once (its job id negated: job ids are positive
--      and unique, and a task's job changes only under the workflow's lock), so that the
--      tasks after it see it among their parents; what its job was enqueued with is read
--      (its dead letter deleted), and its counts to start from.
--   2. One harel_publish of every chosen task, in ordinal order, each waiting for its
--      parents not ended: a chosen one by its position in the call, another by its job.
--   3. Set-based: each task points at its new job; its counts added to its wait (or kept
--      on the task, released at once); the workflow's counts corrected, its cancel
--      cleared.
--   4. The tasks waiting for retried tasks: their groups locked in group order; those
--      that had not counted the old job's end (left to housekeeping) re-pointed at the
--      new job, its backlog row deleted; those that had, in job order, waiting again.
CREATE OR REPLACE FUNCTION @schema@.harel_retry_tasks(
    p_id    BIGINT,
    p_seeds INT[]
) RETURNS TABLE (ordinal INT, old_job BIGINT, new_job BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
-- every table is reached by key
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_min        INT;
    v_job        RECORD;
    v_chosen     INT;
    v_failed     INT;
    v_completed  INT;
    v_dead       INT;
    v_cancelled  INT;
    v_waited     INT;
    v_first_new  BIGINT;
    v_now        TIMESTAMPTZ;
    v_ords       INT[] := ARRAY[]::int[];
    v_names      TEXT[] := ARRAY[]::text[];
    v_old_jobs   BIGINT[] := ARRAY[]::bigint[];
    v_outcomes   TEXT[] := ARRAY[]::text[];
    v_groups     TEXT[] := ARRAY[]::text[];
    v_kinds      TEXT[] := ARRAY[]::text[];
    v_payloads   TEXT[] := ARRAY[]::text[];
    v_priorities SMALLINT[] := ARRAY[]::smallint[];
    v_queues     TEXT[] := ARRAY[]::text[];
    v_traces     TEXT[] := ARRAY[]::text[];
    v_fair_keys  TEXT[] := ARRAY[]::text[];
    v_runs       BOOLEAN[] := ARRAY[]::boolean[];
    v_c          INT[] := ARRAY[]::int[];
    v_d          INT[] := ARRAY[]::int[];
    v_k          INT[] := ARRAY[]::int[];
    v_has_parents BOOLEAN[] := ARRAY[]::boolean[];
    v_waits      BOOLEAN[] := ARRAY[]::boolean[];
    v_after_of   INT[];
    v_after      BIGINT[];
    v_new_jobs   BIGINT[];
    v_held       BIGINT[];
    v_moved_jobs BIGINT[];
    v_moved_to   BIGINT[];
    v_n          INT := 0;
    -- up to this many parents, a task's are looked up one by one; past it, by one read of
    -- the workflow's tasks
    c_few        CONSTANT INT := 32;
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

    -- 1. The candidates, in ordinal order (parents first): the seeds, the cancelled, and the
    -- callbacks that ended (the seeds by a hash join, not an array search per task)
    FOR s IN SELECT t.ordinal, t.name, t.parents, t.outcome, t.run_after_failure, t.job_id,
                    (p_seeds IS NULL AND t.outcome IN ('dead', 'cancelled'))
                        OR z.ord IS NOT NULL AS seed
               FROM @schema@.workflow_tasks t
               LEFT JOIN (SELECT DISTINCT x.ord FROM unnest(p_seeds) AS x(ord)) AS z
                 ON z.ord = t.ordinal
              WHERE t.workflow_id = p_id AND t.ordinal >= v_min
                AND t.outcome IS NOT NULL
                AND (z.ord IS NOT NULL OR t.outcome = 'cancelled' OR t.run_after_failure
                     OR (p_seeds IS NULL AND t.outcome = 'dead'))
              ORDER BY t.ordinal LOOP
        CONTINUE WHEN s.seed AND s.outcome = 'completed';
        -- (downstream of none chosen yet)
        CONTINUE WHEN NOT s.seed AND v_n = 0;
        -- Its parents, by their key, in one read: how many are chosen here (marked), how
        -- many failed and stay so, how many it would wait for (their current jobs have not
        -- ended: queued, or chosen here; a task that does not run after failure waits for
        -- a failed one too, and is cancelled by it, as when it was enqueued), and the
        -- others' outcomes: its counts to start from.
        IF cardinality(s.parents) <= c_few THEN
            -- (each parent by its key)
            SELECT count(*) FILTER (WHERE f.job_id < 0)::int,
                   count(*) FILTER (WHERE f.outcome IN ('dead', 'cancelled'))::int,
                   count(*) FILTER (WHERE f.outcome IS NULL
                                       OR (NOT s.run_after_failure
                                           AND f.outcome <> 'completed'))::int,
                   count(*) FILTER (WHERE f.outcome = 'completed')::int,
                   count(*) FILTER (WHERE f.outcome = 'dead' AND s.run_after_failure)::int,
                   count(*) FILTER (WHERE f.outcome = 'cancelled' AND s.run_after_failure)::int
              INTO v_chosen, v_failed, v_waited, v_completed, v_dead, v_cancelled
              FROM @schema@.workflow_tasks f
             WHERE f.workflow_id = p_id AND f.name = ANY (s.parents);
        ELSE
            -- (a callback of many: the workflow's tasks read once, by its key's range, and
            -- joined to its parents' names by a hash, not a probe per name)
            SELECT count(*) FILTER (WHERE f.job_id < 0)::int,
                   count(*) FILTER (WHERE f.outcome IN ('dead', 'cancelled'))::int,
                   count(*) FILTER (WHERE f.outcome IS NULL
                                       OR (NOT s.run_after_failure
                                           AND f.outcome <> 'completed'))::int,
                   count(*) FILTER (WHERE f.outcome = 'completed')::int,
                   count(*) FILTER (WHERE f.outcome = 'dead' AND s.run_after_failure)::int,
                   count(*) FILTER (WHERE f.outcome = 'cancelled' AND s.run_after_failure)::int
              INTO v_chosen, v_failed, v_waited, v_completed, v_dead, v_cancelled
              FROM (SELECT x.name, x.job_id, x.outcome FROM @schema@.workflow_tasks x
                     WHERE x.workflow_id = p_id OFFSET 0) AS f
              JOIN unnest(s.parents) AS p(name) ON p.name = f.name;
        END IF;
        IF NOT s.seed THEN
            -- downstream of a task chosen here: a callback that ended, or a task cancelled
            -- for the tasks chosen here (no failed parent left)
            CONTINUE WHEN v_chosen = 0;
            CONTINUE WHEN NOT s.run_after_failure
                          AND (s.outcome <> 'cancelled' OR v_failed > 0);
        END IF;

        -- what its job was enqueued with
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
        IF v_job.kind IS NULL AND s.run_after_failure THEN
            SELECT r.group_id, r.kind, r.payload, r.priority, r.queue,
                   NULL::text AS trace_context, r.fair_key
              INTO v_job
              FROM @schema@.workflow_reruns r
             WHERE r.workflow_id = p_id AND r.ordinal = s.ordinal;
        END IF;
        IF v_job.kind IS NULL THEN
            -- (a callback enqueued before workflow_reruns, its job not kept: as it ended)
            CONTINUE WHEN s.run_after_failure AND NOT s.seed;
            RAISE EXCEPTION 'harel_retry_tasks: task % of workflow % cannot be retried: its job % is no longer kept',
                s.name, p_id, s.job_id
                USING ERRCODE = 'HJ003', DETAIL = s.job_id::text;
        END IF;

        -- chosen: marked (its job id negated until its new job's), its outcome cleared
        UPDATE @schema@.workflow_tasks t
           SET job_id = -s.job_id, outcome = NULL, ended_at = NULL,
               completed = NULL, dead = NULL, cancelled = NULL
         WHERE t.workflow_id = p_id AND t.ordinal = s.ordinal;
        v_n := v_n + 1;
        v_ords := v_ords || s.ordinal;
        v_names := v_names || s.name;
        v_old_jobs := v_old_jobs || s.job_id;
        v_outcomes := v_outcomes || s.outcome;
        v_groups := v_groups || CASE WHEN v_job.group_id ~ '^own:[0-9]{19}$' THEN NULL
                                     ELSE v_job.group_id END;
        v_kinds := v_kinds || v_job.kind;
        v_payloads := v_payloads || v_job.payload::text;
        v_priorities := v_priorities || v_job.priority;
        v_queues := v_queues || v_job.queue;
        v_traces := v_traces || v_job.trace_context;
        v_fair_keys := v_fair_keys || v_job.fair_key;
        v_runs := v_runs || s.run_after_failure;
        v_c := v_c || v_completed;
        v_d := v_d || v_dead;
        v_k := v_k || v_cancelled;
        v_has_parents := v_has_parents || (cardinality(s.parents) > 0);
        v_waits := v_waits || (v_waited > 0);
    END LOOP;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- 2. What each waits for: a parent chosen here by its position in the call (an earlier
    -- one: parents come first), another by its current job. The workflow's tasks read
    -- once, by its key's range (the walk above read as many), each edge and each position
    -- found by a hash join, not a probe per name.
    SELECT array_agg(d.waiter ORDER BY d.waiter, d.parent),
           array_agg(d.parent ORDER BY d.waiter, d.parent)
      INTO v_after_of, v_after
      FROM (WITH w AS (SELECT x.ordinal, x.name, x.job_id, x.outcome, x.parents
                         FROM @schema@.workflow_tasks x
                        WHERE x.workflow_id = p_id)
            SELECT r.pos::int AS waiter,
                   CASE WHEN f.job_id < 0 THEN -q.pos ELSE f.job_id END AS parent
              FROM unnest(v_ords, v_runs) WITH ORDINALITY AS r(ord, run, pos)
              JOIN w AS t ON t.ordinal = r.ord
             CROSS JOIN LATERAL unnest(t.parents) AS p(name)
              JOIN w AS f ON f.name = p.name
              LEFT JOIN unnest(v_ords) WITH ORDINALITY AS q(ord, pos) ON q.ord = f.ordinal
             WHERE f.outcome IS NULL OR (NOT r.run AND f.outcome <> 'completed')) AS d;
    -- (a statement of its own, reading no table: Citus, sql/README.md)
    SELECT array_agg(p.s ORDER BY p.n) INTO v_new_jobs
      FROM @schema@.harel_publish(
               v_groups, v_kinds, v_payloads, v_priorities,
               array_fill(NULL::timestamptz, ARRAY[v_n]), array_fill(NULL::bigint, ARRAY[v_n]),
               NULL, NULL, v_queues, v_traces, v_fair_keys, v_after_of, v_after, v_runs)
           WITH ORDINALITY AS p(s, n);
    SELECT min(j.id) INTO v_first_new FROM unnest(v_new_jobs) AS j(id);

    -- 3. Each task points at its new job (by its key)
    UPDATE @schema@.workflow_tasks t
       SET job_id = x.new_job
      FROM unnest(v_ords, v_new_jobs) AS x(ord, new_job)
     CROSS JOIN LATERAL (SELECT y.ctid AS row_ctid FROM @schema@.workflow_tasks y
                          WHERE y.workflow_id = p_id AND y.ordinal = x.ord OFFSET 0) AS r
     WHERE t.ctid = r.row_ctid;
    -- its counts start from the parents it does not wait for: added to its wait (a new
    -- row, of this transaction)
    WITH counted AS (
        UPDATE @schema@.job_waits w
           SET completed = w.completed + x.c, dead = w.dead + x.d,
               cancelled = w.cancelled + x.k
          FROM unnest(v_new_jobs, v_c, v_d, v_k, v_waits) AS x(job, c, d, k, waits)
         CROSS JOIN LATERAL (SELECT y.ctid AS row_ctid FROM @schema@.job_waits y
                              WHERE y.job_id = x.job OFFSET 0) AS r
         WHERE w.ctid = r.row_ctid AND x.waits
        RETURNING w.job_id
    )
    SELECT array_agg(c.job_id) INTO v_held FROM counted AS c;
    -- the others were released at once: a task with parents that waits for none keeps
    -- those counts (one without parents keeps none); one whose parents ended meanwhile (it
    -- waited for one) counts them all, as its release would have
    UPDATE @schema@.workflow_tasks t
       SET completed = x.c, dead = x.d, cancelled = x.k
      FROM (SELECT * FROM unnest(v_ords, v_c, v_d, v_k, v_has_parents, v_waits)
                          AS y(ord, c, d, k, has_parents, waits)
             WHERE y.has_parents AND NOT y.waits) AS x
     CROSS JOIN LATERAL (SELECT y.ctid AS row_ctid FROM @schema@.workflow_tasks y
                          WHERE y.workflow_id = p_id AND y.ordinal = x.ord OFFSET 0) AS r
     WHERE t.ctid = r.row_ctid;
    FOR s IN SELECT x.ord, x.job, y.parents
               FROM (SELECT z.ord, z.job
                       FROM unnest(v_ords, v_new_jobs, v_waits) AS z(ord, job, waits)
                       LEFT JOIN unnest(v_held) AS h(job) ON h.job = z.job
                      WHERE z.waits AND h.job IS NULL) AS x
              CROSS JOIN LATERAL (SELECT y.parents FROM @schema@.workflow_tasks y
                                   WHERE y.workflow_id = p_id AND y.ordinal = x.ord
                                  OFFSET 0) AS y
    LOOP
        -- (rare: a parent's settle committed between this call's look and harel_hold's)
        SELECT count(*) FILTER (WHERE f.outcome = 'completed')::int,
               count(*) FILTER (WHERE f.outcome = 'dead')::int,
               count(*) FILTER (WHERE f.outcome = 'cancelled')::int
          INTO v_completed, v_dead, v_cancelled
          FROM @schema@.workflow_tasks f
         WHERE f.workflow_id = p_id AND f.name = ANY (s.parents);
        UPDATE @schema@.workflow_tasks t
           SET completed = v_completed, dead = v_dead, cancelled = v_cancelled
         WHERE t.workflow_id = p_id AND t.ordinal = s.ord;
        -- a job cancelled at once, by a parent that failed meanwhile, ended before its task
        -- pointed at it: its end recorded here
        IF EXISTS (SELECT 1 FROM @schema@.job_history h
                    WHERE h.id = s.job AND h.state = 'cancelled') THEN
            v_now := clock_timestamp();
            UPDATE @schema@.workflow_tasks t SET outcome = 'cancelled', ended_at = v_now
             WHERE t.workflow_id = p_id AND t.ordinal = s.ord;
            INSERT INTO @schema@.workflow_ends (workflow_id, ended, failed, cancelled)
            VALUES (p_id, 1, 1, 1);
        END IF;
    END LOOP;
    -- the workflow's counts: what the chosen tasks' ends had added, taken back; its cancel
    INSERT INTO @schema@.workflow_ends (workflow_id, ended, failed, cancelled)
    SELECT p_id, -count(*)::int, -count(*) FILTER (WHERE o.outcome <> 'completed')::int,
           -count(*) FILTER (WHERE o.outcome = 'cancelled')::int
      FROM unnest(v_outcomes) AS o(outcome);
    UPDATE @schema@.workflows w SET cancelled_at = NULL
     WHERE w.id = p_id AND w.cancelled_at IS NOT NULL;

    -- 4. Tasks still waiting for a retried task: their groups locked first, in one
    -- statement, in group order, as a settle resolving them takes them (ADR 0037: every
    -- writer of a job's waits holds its group first); then each job_waits row in job order.
    -- (The tasks retried here wait for the new jobs already: their jobs are the new ones; a
    -- task released meanwhile keeps what it was released with.)
    PERFORM 1 FROM @schema@.transport_groups g
     WHERE g.group_id = ANY (ARRAY(
               SELECT w.group_id
                 FROM @schema@.workflow_tasks t
                 JOIN @schema@.job_waits w ON w.job_id = t.job_id
                WHERE t.workflow_id = p_id AND t.outcome IS NULL AND t.job_id > 0
                  AND t.job_id < v_first_new AND t.parents && v_names))
     ORDER BY g.group_id
       FOR NO KEY UPDATE;
    -- Those that had not counted the old job's end yet (left to housekeeping: ADR 0037)
    -- wait for the new job instead, and the old job's backlog row goes.
    WITH moved AS (
        UPDATE @schema@.job_dependencies d
           SET parent_id = x.new_job
          FROM unnest(v_old_jobs, v_new_jobs) AS x(old_job, new_job)
         WHERE d.parent_id = x.old_job
        RETURNING d.job_id, x.new_job
    )
    SELECT array_agg(m.job_id), array_agg(m.new_job) INTO v_moved_jobs, v_moved_to FROM moved m;
    DELETE FROM @schema@.dependency_backlog b WHERE b.parent_id = ANY (v_old_jobs);
    -- The others, which had counted it: they wait for its new job now, the end taken back
    -- from their counts, before their dependency rows; no row is locked after these.
    FOR s IN SELECT t.job_id, array_agg(r.job) AS parents,
                    count(*) FILTER (WHERE r.outcome = 'completed')::int AS n_completed,
                    count(*) FILTER (WHERE r.outcome = 'dead')::int AS n_dead,
                    count(*) FILTER (WHERE r.outcome = 'cancelled')::int AS n_cancelled
               FROM @schema@.workflow_tasks t
              CROSS JOIN LATERAL unnest(t.parents) AS p(name)
               JOIN unnest(v_names, v_new_jobs, v_outcomes) AS r(name, job, outcome)
                 ON r.name = p.name
              WHERE t.workflow_id = p_id AND t.outcome IS NULL AND t.job_id < v_first_new
                AND NOT EXISTS (SELECT 1 FROM unnest(v_moved_jobs, v_moved_to) AS m(job, parent)
                                 WHERE m.job = t.job_id AND m.parent = r.job)
              GROUP BY t.job_id
              ORDER BY t.job_id LOOP
        UPDATE @schema@.job_waits w
           SET waiting = w.waiting + cardinality(s.parents),
               completed = w.completed - s.n_completed,
               dead = w.dead - s.n_dead, cancelled = w.cancelled - s.n_cancelled
         WHERE w.job_id = s.job_id;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO @schema@.job_dependencies (parent_id, job_id)
        SELECT p.job, s.job_id FROM unnest(s.parents) AS p(job);
    END LOOP;

    RETURN QUERY
    SELECT x.ord, x.old_job, x.new_job
      FROM unnest(v_ords, v_old_jobs, v_new_jobs) AS x(ord, old_job, new_job);
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_retry_tasks(BIGINT, INT[]) FROM PUBLIC;
