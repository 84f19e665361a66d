-- harel_hold: records what the messages of a publish wait for (ADR 0033), and resolves at
-- once the parents that have already ended. Internal: called by harel_publish, in its
-- transaction, after it inserted the messages (each not before the pending time).
--
-- Takes:
--   p_jobs      per message of the publish, its id (negated: a duplicate, not written)
--   p_groups    per message, its group
--   p_keys      per message, its unique key (NULL: none)
--   p_after_of, p_after
--               harel_publish's: per dependency, the waiting message's position and its
--               parent (a job id, or -n: the publish's n-th message)
--   p_run       per message: true runs it after a parent that failed
--   p_starts    per message: the not-before time it asked for (NULL: none)
--   p_delays    per message: the delay it asked for, counted from its release (ms; NULL:
--               none)
-- Returns: nothing.
-- Fence: a parent named by id must be older than every message of the publish (its
--   own messages are named by position), so every dependency points to an older job and
--   none closes a cycle. Who may wait for whom (ADR 0037): a login that may read jobs
--   (EXECUTE on harel_job, or the schema's owner) may name any job; any other (a producer)
--   only a job its own transaction enqueued, found queued with its row written by this
--   transaction: else 42501, the same error whether the job is queued, kept or unknown, so
--   that the check tells a producer nothing it did not write. A dependency on a duplicate is one on the job holding its key
--   (which must be older than the waiting job: else 40001, try again). Each parent must be
--   the publish's own, queued, or kept as ended (job_history, dead_letters, or a unique
--   key held on after its job completed).
-- Locks: none of the parents' (a producer holds nothing a settle waits for), and of the
--   dependents only the groups its publish created for them (groups of their own). A parent
--   found queued whose settle commits between this lookup and the producer's commit does
--   not see the dependency; harel_maintain's sweep resolves it (ADR 0033).
-- Indexes: transport_messages_by_id, transport_groups' key and
--   transport_groups_by_inline_id (a job by id, as harel_cancel finds it); the keys of
--   job_history, dead_letters, job_waits and job_dependencies.
-- Errors: 22023 for a parent id not older than the publish's messages; 40001 for a key's
--   holder younger than its waiter; 42501 for a parent a producer may not name (above;
--   its id in DETAIL); HJ002 for a parent neither queued nor kept (completed without
--   retention, pruned, or never a job; its id in the error's DETAIL).
--
-- Steps:
--   1. The dependencies by id (positions resolved, duplicates' own dropped), without
--      repeats; the parents checked older than the publish.
--   2. job_waits: each waiting job, its group, parent count, run flag and start time;
--      job_dependencies: each (parent, job).
--   3. Each parent other than the publish's own jobs located (a few rounds): queued, or
--      ended (looked up where an ended job is kept); for a login that may not read jobs,
--      queued and written by this transaction, or 42501.
--   4. Parents that had ended: harel_resolve_dependents, as if they ended now, for this
--      publish's jobs in groups of their own (the only groups it may lock: nobody else
--      sees them); the others' release is left to housekeeping (dependency_backlog).
CREATE OR REPLACE FUNCTION "harel".harel_hold(
    p_jobs      BIGINT[],
    p_groups    TEXT[],
    p_keys      TEXT[],
    p_after_of  INT[],
    p_after     BIGINT[],
    p_run       BOOLEAN[],
    p_starts    TIMESTAMPTZ[],
    p_delays    BIGINT[]
) RETURNS VOID
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
    v_oldest_new BIGINT;
    v_dep_jobs   BIGINT[];
    v_dep_parents BIGINT[];
    v_todo       BIGINT[];
    v_ids        BIGINT[];
    v_found      BIGINT[];
    v_ended      BIGINT[] := ARRAY[]::bigint[];
    v_outcomes   TEXT[] := ARRAY[]::text[];
    v_more_ids   BIGINT[];
    v_more_outs  TEXT[];
    v_may_read   BOOLEAN;
    v_not_mine   BIGINT;
    v_own        BIGINT[];
BEGIN
    SELECT min(j.id) INTO v_oldest_new FROM unnest(p_jobs) AS j(id) WHERE j.id > 0;
    IF v_oldest_new IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_after) AS a(parent) WHERE a.parent >= v_oldest_new) THEN
        RAISE EXCEPTION 'harel_publish: a job to wait for, named by id, must be older than the jobs being enqueued (name those by their position)'
            USING ERRCODE = '22023';
    END IF;

    -- The dependencies by id: a position becomes that message's id (a duplicate's: its
    -- holder's), a duplicate's own dependencies go with it.
    SELECT array_agg(d.job_id ORDER BY d.job_id, d.parent_id),
           array_agg(d.parent_id ORDER BY d.job_id, d.parent_id)
      INTO v_dep_jobs, v_dep_parents
      FROM (SELECT DISTINCT p_jobs[x.waiter] AS job_id,
                   CASE WHEN x.parent > 0 THEN x.parent ELSE abs(p_jobs[-x.parent]) END
                       AS parent_id
              FROM unnest(p_after_of, p_after) AS x(waiter, parent)
             WHERE p_jobs[x.waiter] > 0) AS d;
    IF v_dep_jobs IS NULL THEN
        RETURN;
    END IF;
    -- A duplicate's holder is another transaction's job: if it is younger than the job
    -- waiting for it, the waiter could come first in a group they share and wait for ever
    -- behind... itself. Rare (two producers racing for one key): try again, with new ids.
    IF EXISTS (SELECT 1 FROM unnest(v_dep_jobs, v_dep_parents) AS d(job_id, parent_id)
                WHERE d.parent_id >= d.job_id) THEN
        RAISE EXCEPTION 'harel_publish: a job to wait for (a unique key''s holder) is younger than the job waiting for it; try again'
            USING ERRCODE = '40001';
    END IF;

    -- (settles look for dependents from now on: see dependents_seen in migration 0015)
    IF pg_sequence_last_value('"harel".dependents_seen'::regclass) IS NULL THEN
        PERFORM nextval('"harel".dependents_seen');
    END IF;
    INSERT INTO "harel".job_waits (job_id, group_id, waiting, run_after_failure, not_before,
                                    delay_ms)
    SELECT w.job_id, p_groups[p.ord], w.n, COALESCE(p_run[p.ord], false), p_starts[p.ord],
           p_delays[p.ord]
      FROM (SELECT d.job_id, count(*)::int AS n FROM unnest(v_dep_jobs) AS d(job_id)
             GROUP BY d.job_id) AS w
      -- (each waiting job's position: a hash join with the publish's ids)
      JOIN unnest(p_jobs) WITH ORDINALITY AS p(id, ord) ON p.id = w.job_id;
    INSERT INTO "harel".job_dependencies (parent_id, job_id)
    SELECT d.parent_id, d.job_id FROM unnest(v_dep_parents, v_dep_jobs) AS d(parent_id, job_id);

    -- The parents to look for: not the publish's own jobs (just inserted, pending or due;
    -- nobody else sees them before we commit).
    SELECT array_agg(DISTINCT d.parent_id ORDER BY d.parent_id) INTO v_todo
      FROM unnest(v_dep_parents) AS d(parent_id)
     WHERE NOT EXISTS (SELECT 1 FROM unnest(p_jobs) AS j(id) WHERE j.id = d.parent_id);

    -- A producer may make its jobs wait only for jobs its own transaction enqueued: the
    -- check below would otherwise tell it whether any job is queued, kept or unknown, and
    -- a dependent costs its parent's settle work (ADR 0037). A login that may read jobs
    -- may name any.
    IF v_todo IS NOT NULL THEN
        v_may_read := has_function_privilege(session_user,
                                             '"harel".harel_job(bigint)', 'EXECUTE');
    END IF;
    IF v_todo IS NOT NULL AND NOT v_may_read THEN
        -- (a row this transaction wrote carries its id as xmin; the job's row: its message,
        -- or its group's row holding it inline)
        SELECT t.id INTO v_not_mine
          FROM unnest(v_todo) AS t(id)
         -- (a unique key's holder, named through this publish's duplicate: the publish
         -- answers its id anyway)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(p_jobs) AS j(id) WHERE j.id = -t.id)
           AND NOT EXISTS (SELECT 1 FROM "harel".transport_messages m
                            WHERE m.seq = t.id AND m.xmin = pg_current_xact_id()::xid)
           AND NOT EXISTS (SELECT 1 FROM "harel".transport_groups g
                            WHERE g.group_id = 'own:' || lpad(t.id::text, 19, '0')
                              AND g.inline_seq = t.id
                              AND g.xmin = pg_current_xact_id()::xid)
           AND NOT EXISTS (SELECT 1 FROM "harel".transport_groups g
                            WHERE g.inline_seq = t.id
                              AND g.xmin = pg_current_xact_id()::xid)
         LIMIT 1;
        IF v_not_mine IS NOT NULL THEN
            RAISE EXCEPTION 'harel_publish: job % to wait for was not enqueued in this transaction; naming another job needs the right to read jobs (EXECUTE on harel_job)',
                v_not_mine
                USING ERRCODE = '42501', DETAIL = v_not_mine::text;
        END IF;
    END IF;

    FOR round IN 1..3 LOOP
        EXIT WHEN v_todo IS NULL;
        -- the queued parents (a job by id, as harel_cancel finds it)
        SELECT array_agg(x.id) INTO v_ids
          FROM unnest(v_todo) AS t(id)
         CROSS JOIN LATERAL (
                SELECT t.id, COALESCE(
                    (SELECT m.group_id FROM "harel".transport_messages m WHERE m.seq = t.id),
                    (SELECT g.group_id FROM "harel".transport_groups g
                      WHERE g.group_id = 'own:' || lpad(t.id::text, 19, '0')
                        AND g.inline_seq = t.id),
                    (SELECT g.group_id FROM "harel".transport_groups g
                      WHERE g.inline_seq = t.id
                        AND g.group_id <> 'own:' || lpad(g.inline_seq::text, 19, '0')))
                       AS group_id) AS x
         WHERE x.group_id IS NOT NULL;
        -- No lock: a producer must not be able to hold a settle (a parent's group row held
        -- until the producer commits would make the parent's settle, and its whole batch,
        -- wait for the producer). A parent found queued here whose settle commits before
        -- this transaction does cannot see these dependency rows: harel_maintain's sweep
        -- finds such a row (its parent gone) and resolves it.
        v_found := v_ids;
        -- the others, ended: kept in job_history or dead_letters, or the holder of a unique
        -- key held on after its job completed (a completion leaves that much)
        SELECT array_agg(e.id), array_agg(e.outcome) INTO v_more_ids, v_more_outs
          FROM (SELECT t.id FROM unnest(v_todo) AS t(id)
                 WHERE NOT EXISTS (SELECT 1 FROM unnest(v_found) AS f(id) WHERE f.id = t.id))
               AS t
         CROSS JOIN LATERAL (
                SELECT t.id, COALESCE(
                    (SELECT h.state FROM "harel".job_history h WHERE h.id = t.id),
                    (SELECT 'dead' FROM "harel".dead_letters d WHERE d.id = t.id),
                    (SELECT 'completed' FROM unnest(p_after_of, p_after) AS a(waiter, parent)
                      WHERE a.parent < 0 AND -p_jobs[-a.parent] = t.id
                        AND EXISTS (SELECT 1 FROM "harel".unique_keys u
                                     WHERE u.key = p_keys[-a.parent] AND u.job_id = t.id
                                       AND u.held_until IS NOT NULL)
                      LIMIT 1)) AS outcome
              ) AS e
         WHERE e.outcome IS NOT NULL;
        v_ended := v_ended || COALESCE(v_more_ids, '{}');
        v_outcomes := v_outcomes || COALESCE(v_more_outs, '{}');
        SELECT array_agg(t.id) INTO v_todo
          FROM unnest(v_todo) AS t(id)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(v_found) AS f(id) WHERE f.id = t.id)
           AND NOT EXISTS (SELECT 1 FROM unnest(v_more_ids) AS m(id) WHERE m.id = t.id);
    END LOOP;
    IF v_todo IS NOT NULL THEN
        RAISE EXCEPTION 'harel_publish: job % to wait for is neither queued nor kept (it completed without retention, was pruned, or never existed)',
            v_todo[1]
            USING ERRCODE = 'HJ002', DETAIL = v_todo[1]::text;
    END IF;

    IF cardinality(v_ended) > 0 THEN
        SELECT array_agg(j.id) INTO v_own FROM unnest(p_jobs) AS j(id) WHERE j.id > 0;
        PERFORM "harel".harel_resolve_dependents(v_ended, v_outcomes, p_dependents => v_own);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_hold(BIGINT[], TEXT[], TEXT[], INT[], BIGINT[],
                                         BOOLEAN[], TIMESTAMPTZ[], BIGINT[])
    FROM PUBLIC;
