-- harel_maintain: housekeeping. A worker's entry point: its maintenance task calls it about
-- once a second, less often while calls are slow. Any number of workers may call it; one
-- works at a time.
--
-- Takes: nothing.
-- Returns one row:
--   floors_lowered   claim and ready floors lowered to a straggler
--   receipts_pruned  settle receipts deleted
--   history_pruned   job_history rows deleted
-- Fence: the 'housekeeping' row of `elections`: a call that cannot lock it returns zeros
--   at once.
-- Locks: that row, FOR UPDATE SKIP LOCKED (never waits; held until the caller's transaction
--   ends); the rows it deletes; in step 6, parked groups (harel_unpark_queue) and a queue's
--   row, both SKIP LOCKED.
-- Indexes: transport_groups_timed and transport_groups_ready below each floor; settle_receipts' key;
--   job_history_keep_until; unique_keys_held_until; throughput's key (minute, worker);
--   workers_seen_at; key_rates' key; job_steps' and job_attempts' keys, then per job
--   (harel_jobs_gone) transport_messages_by_id, transport_groups' key ('own:' and the id),
--   transport_groups_by_inline_id and the keys of job_history and dead_letters (what
--   harel_job reads); job_dependencies' key, then the same per parent; queues_unpark_pending
--   and harel_unpark_queue's (step 6); harel_prune_workflows' (step 7).
-- Errors: none of its own.
--
-- Steps:
--   1. Lock the 'housekeeping' row, or return zeros.
--   2. The sweep, over the default queue and the next 64 named queues after the last one
--      swept (the sequence maintain_sweep, outside MVCC; from the first again past the
--      last), so a call costs the same with 4 queues or 1,000 (with 1,000 named queues and
--      a call a second, each is swept every 16 s). Per level, a claimable group below the
--      floor is a straggler: its transaction committed well after it wrote (a long
--      transaction around an enqueue whose NOTIFY reached no worker). The floor goes down
--      to 1 ms below the oldest, so that the next claim finds it; likewise a ready group
--      tagged below its queue's ready floor (fair_floor_q<N>). This reads the dead
--      entries below the floor: cheap while vacuum keeps up, slower under an old snapshot,
--      which is why the worker spaces its calls by how long they take.
--   3. Prune, oldest first, by index: settle receipts older than an hour (each worker
--      deletes its previous one with every batch: only a stopped worker's last stays),
--      job_history rows past keep_until, unique keys whose hold is over, throughput rows
--      older than a day (each at most 10,000 a call); worker pools not seen for a day, and
--      those beyond the 10,000 seen last (each at most 1,000 a call); the rate states of
--      fairness keys whose times have passed (key_rates: such a row means no more than no
--      row; at most 10,000 a call, found by a walk of that table, which holds a row per key
--      that started or waited in the last period of a key-rate-limited queue).
--   4. The durable steps of jobs that are gone (job_steps): the next 1,000 rows of that
--      table in key order after the job id the last call stopped at (the sequence
--      step_sweep, outside MVCC; from the first again once past the last), each of their
--      jobs looked up by key where a job can be (queued, job_history, dead_letters); the
--      rows of the jobs found nowhere are deleted. A job's id is never used again, and a
--      job that is gone never comes back (a retried dead letter is a new job), so that is
--      final. A call reads at most 1,000 rows and looks up at most 1,000 jobs, whatever
--      the queue's depth; a job's steps go within one walk of the table after the job
--      does (step rows / 1,000 calls).
--      The attempts of jobs that are gone (job_attempts), walked the same way from
--      attempt_sweep (at most 100 rows a job).
--   5. Once the schema held a dependency: the dependencies whose parent ended without
--      resolving them (a producer's race with the parent's settle): the next 1,000 rows
--      of job_dependencies after the parent the last call stopped at (dependency_sweep),
--      each parent looked up by key; those not queued resolved (harel_resolve_dependents)
--      with the outcome dependency_backlog, job_history or dead_letters keeps, or as
--      completed. Then a page of 1,000 rows of the backlog (harel_resolve_backlog).
--   6. A queue whose limit per fairness key was raised or removed with groups left parked
--      (queues.unpark_through, by queues_unpark_pending): the next 10,000 of them given
--      back (harel_unpark_queue), oldest first; fewer found: the marker cleared (the queue's
--      row, FOR NO KEY UPDATE SKIP LOCKED: a claim or an operator holding it leaves it to
--      the next call). One queue a call.
--   7. Once the schema held a dependency or a workflow: the workflows that ended long
--      enough ago (harel_prune_workflows: at most 1,000 rows of workflow_tasks walked a
--      call, ADR 0040).
CREATE OR REPLACE FUNCTION "harel".harel_maintain()
RETURNS TABLE (floors_lowered INT, receipts_pruned BIGINT, history_pruned BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_floor     BIGINT;
    v_tag       BIGINT;
    v_floor_name TEXT;
    q           RECORD;
    v_straggler TIMESTAMPTZ;
    v_lowered   INT := 0;
    v_pruned    BIGINT;
    v_history   BIGINT;
    v_after     BIGINT;
    v_last      BIGINT;
    v_step_jobs  BIGINT[];
    v_step_last  BIGINT;
    v_step_rows  INT;
    v_gone       BIGINT[];
    -- named queues swept per call
    c_window    CONSTANT INT := 64;
    -- job_steps rows walked per call
    c_step_rows CONSTANT INT := 1000;
    -- job_dependencies rows walked per call
    c_dep_rows  CONSTANT INT := 1000;
    v_dep_parents BIGINT[];
    v_dep_rows    INT;
    v_dep_last    BIGINT;
    v_outcomes    TEXT[];
    -- parked groups given back per call, after a raised limit per key (step 6)
    c_unpark_rows CONSTANT INT := 10000;
    v_unpark_queue SMALLINT;
    v_unpark_through BIGINT;
BEGIN
    PERFORM 1 FROM "harel".elections e WHERE e.name = 'housekeeping'
        FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0::bigint, 0::bigint;
        RETURN;
    END IF;

    -- The default queue, then the next c_window named queues after the last one swept
    -- (from the first again once past the last). Queue 0's sequences are
    -- claim_floor_<level>.
    v_after := pg_sequence_last_value('"harel".maintain_sweep'::regclass);
    SELECT max(w.id)::bigint INTO v_last
      FROM (SELECT qs.id FROM "harel".queues qs
             WHERE qs.id > COALESCE(v_after, 0)
             ORDER BY qs.id LIMIT c_window) AS w;
    IF v_last IS NULL AND COALESCE(v_after, 0) > 0 THEN
        v_after := 0;
        SELECT max(w.id)::bigint INTO v_last
          FROM (SELECT qs.id FROM "harel".queues qs
                 WHERE qs.id > 0 ORDER BY qs.id LIMIT c_window) AS w;
    END IF;
    PERFORM setval('"harel".maintain_sweep'::regclass, COALESCE(v_last, 0), v_last IS NOT NULL);
    FOR q IN SELECT qs.id FROM "harel".queues qs
              WHERE qs.id = 0 OR qs.id BETWEEN COALESCE(v_after, 0) + 1 AND v_last
              ORDER BY qs.id LOOP
        v_floor_name := CASE WHEN q.id = 0 THEN '"harel".claim_floor_'
                             ELSE '"harel".claim_floor_q' || q.id || '_' END;
        FOR l IN 0..4 LOOP
            v_floor := COALESCE(pg_sequence_last_value((v_floor_name || l)::regclass), 0);
            v_straggler := NULL;
            -- below the floor, so in the past: claimable, whether free, parked or lease lapsed
            SELECT g.available_at INTO v_straggler
              FROM "harel".transport_groups g
             WHERE g.queue_id = q.id AND g.priority = l
               AND g.fair_tag IS NULL
               AND g.available_at < timestamptz 'epoch' + v_floor * interval '1 microsecond'
             ORDER BY g.available_at
             LIMIT 1;
            IF v_straggler IS NOT NULL THEN
                PERFORM setval((v_floor_name || l)::regclass,
                               GREATEST((extract(epoch FROM v_straggler) * 1000000)::bigint - 1000, 0));
                v_lowered := v_lowered + 1;
            END IF;
        END LOOP;
        -- the same for the queue's ready floor: a tag below it committed late (a
        -- transaction of more than 250 ms whose NOTIFY reached no worker)
        v_floor := COALESCE(pg_sequence_last_value(
                       ('"harel".fair_floor_q' || q.id)::regclass), 0);
        SELECT min((SELECT g.fair_tag FROM "harel".transport_groups g
                     WHERE g.queue_id = q.id AND g.priority = l.level
                       AND g.fair_tag IS NOT NULL AND g.fair_tag < v_floor
                     ORDER BY g.fair_tag
                     LIMIT 1))
          INTO v_tag
          FROM generate_series(0, 4) AS l(level);
        IF v_tag IS NOT NULL THEN
            PERFORM setval(('"harel".fair_floor_q' || q.id)::regclass, v_tag);
            v_lowered := v_lowered + 1;
        END IF;
    END LOOP;

    WITH pruned AS (
        DELETE FROM "harel".settle_receipts r
         WHERE r.receipt IN (SELECT o.receipt FROM "harel".settle_receipts o
                              WHERE o.created_at < statement_timestamp() - interval '1 hour'
                              LIMIT 10000)
        RETURNING 1
    )
    SELECT count(*) INTO v_pruned FROM pruned;

    WITH pruned AS (
        DELETE FROM "harel".job_history h
         -- = ANY (ARRAY(…)): rows looked up by key (see sql/README.md)
         WHERE h.id = ANY (ARRAY(SELECT o.id FROM "harel".job_history o
                                  WHERE o.keep_until < statement_timestamp()
                                  ORDER BY o.keep_until
                                  LIMIT 10000))
        RETURNING 1
    )
    SELECT count(*) INTO v_history FROM pruned;

    DELETE FROM "harel".unique_keys u
     WHERE u.key = ANY (ARRAY(SELECT o.key FROM "harel".unique_keys o
                               WHERE o.held_until < statement_timestamp()
                               ORDER BY o.held_until
                               LIMIT 10000));

    -- worker reports older than a day
    DELETE FROM "harel".throughput t
     WHERE (t.minute, t.worker) IN (SELECT o.minute, o.worker FROM "harel".throughput o
                                     WHERE o.minute < statement_timestamp() - interval '1 day'
                                     ORDER BY o.minute
                                     LIMIT 10000);
    DELETE FROM "harel".workers w
     WHERE w.id = ANY (ARRAY(SELECT o.id FROM "harel".workers o
                              WHERE o.seen_at < statement_timestamp() - interval '1 day'
                              ORDER BY o.seen_at
                              LIMIT 1000));
    -- and beyond the 10,000 pools seen last (a worker role can report as many pools as it
    -- likes), the least recently seen, 1,000 a call
    DELETE FROM "harel".workers w
     WHERE w.id = ANY (ARRAY(SELECT o.id FROM "harel".workers o
                              ORDER BY o.seen_at DESC
                              OFFSET 10000 LIMIT 1000));

    -- (the times are checked again on the row deleted: a claim may have advanced it since)
    DELETE FROM "harel".key_rates kr
     WHERE (kr.queue_id, kr.key) IN (
               SELECT o.queue_id, o.key FROM "harel".key_rates o
                WHERE GREATEST(o.tat_us, o.slot_us)
                      < extract(epoch FROM statement_timestamp()) * 1000000
                LIMIT 10000)
       AND GREATEST(kr.tat_us, kr.slot_us)
           < extract(epoch FROM statement_timestamp()) * 1000000;

    -- the steps of jobs that are gone: the next c_step_rows rows in key order after the
    -- job the last call stopped at
    v_after := pg_sequence_last_value('"harel".step_sweep'::regclass);
    SELECT array_agg(w.job_id ORDER BY w.job_id), count(*)::int
      INTO v_step_jobs, v_step_rows
      FROM (SELECT s.job_id FROM "harel".job_steps s
             WHERE s.job_id > COALESCE(v_after, 0)
             ORDER BY s.job_id, s.name
             LIMIT c_step_rows) AS w;
    IF v_step_rows > 0 THEN
        v_gone := "harel".harel_jobs_gone(v_step_jobs);
        IF v_gone IS NOT NULL THEN
            DELETE FROM "harel".job_steps s WHERE s.job_id = ANY (v_gone);
        END IF;
        -- a full batch may have stopped inside its last job: the next call begins with
        -- that job again, unless the batch was that job alone (at most 1,000 steps a job)
        v_step_last := v_step_jobs[v_step_rows];
        IF v_step_rows = c_step_rows AND v_step_jobs[1] <> v_step_last THEN
            v_step_last := v_step_last - 1;
        ELSIF v_step_rows < c_step_rows THEN
            v_step_last := NULL;
        END IF;
    END IF;
    PERFORM setval('"harel".step_sweep'::regclass, COALESCE(v_step_last, 0),
                   v_step_last IS NOT NULL);

    -- the attempts of jobs that are gone, walked the same way (at most 100 rows a job)
    v_after := pg_sequence_last_value('"harel".attempt_sweep'::regclass);
    v_step_last := NULL;
    SELECT array_agg(w.job_id ORDER BY w.job_id), count(*)::int
      INTO v_step_jobs, v_step_rows
      FROM (SELECT a.job_id FROM "harel".job_attempts a
             WHERE a.job_id > COALESCE(v_after, 0)
             ORDER BY a.job_id, a.attempt
             LIMIT c_step_rows) AS w;
    IF v_step_rows > 0 THEN
        v_gone := "harel".harel_jobs_gone(v_step_jobs);
        IF v_gone IS NOT NULL THEN
            DELETE FROM "harel".job_attempts a WHERE a.job_id = ANY (v_gone);
        END IF;
        v_step_last := v_step_jobs[v_step_rows];
        IF v_step_rows = c_step_rows AND v_step_jobs[1] <> v_step_last THEN
            v_step_last := v_step_last - 1;
        ELSIF v_step_rows < c_step_rows THEN
            v_step_last := NULL;
        END IF;
    END IF;
    PERFORM setval('"harel".attempt_sweep'::regclass, COALESCE(v_step_last, 0),
                   v_step_last IS NOT NULL);

    -- Dependencies whose parent ended without resolving them (ADR 0033: a producer holds
    -- no lock, so a parent whose settle committed between the producer's look at it and
    -- the producer's commit did not see the dependency): the next c_dep_rows rows of
    -- job_dependencies in key order after the parent the last call stopped at (the
    -- sequence dependency_sweep, outside MVCC; from the first again once past the last),
    -- each distinct parent looked up by key where a queued job is; those found nowhere
    -- ended, as job_history or dead_letters says, or, leaving no trace, completed. Resolved
    -- as their settle would have (harel_resolve_dependents: a row the settle resolved
    -- meanwhile is gone when it looks, so nothing is resolved twice). Only once the schema
    -- held a dependency (dependents_seen).
    IF pg_sequence_last_value('"harel".dependents_seen'::regclass) IS NOT NULL THEN
        v_after := pg_sequence_last_value('"harel".dependency_sweep'::regclass);
        SELECT array_agg(w.parent_id ORDER BY w.parent_id), count(*)::int
          INTO v_dep_parents, v_dep_rows
          FROM (SELECT d.parent_id FROM "harel".job_dependencies d
                 WHERE d.parent_id > COALESCE(v_after, 0)
                 ORDER BY d.parent_id, d.job_id
                 LIMIT c_dep_rows) AS w;
        v_dep_last := NULL;
        IF v_dep_rows > 0 THEN
            SELECT array_agg(j.id), array_agg(j.outcome) INTO v_gone, v_outcomes
              FROM (SELECT x.id,
                           COALESCE(
                               (SELECT 'queued' FROM "harel".transport_messages m
                                 WHERE m.seq = x.id LIMIT 1),
                               (SELECT 'queued' FROM "harel".transport_groups g
                                 WHERE g.group_id = 'own:' || lpad(x.id::text, 19, '0')
                                   AND g.inline_seq = x.id),
                               (SELECT 'queued' FROM "harel".transport_groups g
                                 WHERE g.inline_seq = x.id
                                   AND g.group_id <> 'own:' || lpad(g.inline_seq::text, 19, '0')
                                 LIMIT 1),
                               -- (an end left to housekeeping keeps its outcome)
                               (SELECT b.outcome FROM "harel".dependency_backlog b
                                 WHERE b.parent_id = x.id LIMIT 1),
                               (SELECT h.state FROM "harel".job_history h WHERE h.id = x.id),
                               (SELECT 'dead' FROM "harel".dead_letters d WHERE d.id = x.id),
                               'completed') AS outcome
                      FROM (SELECT DISTINCT u.id FROM unnest(v_dep_parents) AS u(id)) AS x
                    OFFSET 0) AS j
             WHERE j.outcome <> 'queued';
            IF v_gone IS NOT NULL THEN
                PERFORM "harel".harel_resolve_dependents(v_gone, v_outcomes,
                                                          p_backlog => true);
            END IF;
            -- a full batch may have stopped inside its last parent's rows: the next call
            -- begins with that parent again, unless the batch was that parent alone
            v_dep_last := v_dep_parents[v_dep_rows];
            IF v_dep_rows = c_dep_rows AND v_dep_parents[1] <> v_dep_last THEN
                v_dep_last := v_dep_last - 1;
            ELSIF v_dep_rows < c_dep_rows THEN
                v_dep_last := NULL;
            END IF;
        END IF;
        PERFORM setval('"harel".dependency_sweep'::regclass, COALESCE(v_dep_last, 0),
                       v_dep_last IS NOT NULL);
        -- A page of the dependents the ends of their parents left (a worker's housekeeping
        -- calls harel_resolve_backlog itself, again while more are left: this page is for
        -- the workers that do not, a previous release's or a role without that grant)
        PERFORM "harel".harel_resolve_backlog(c_dep_rows);
    END IF;

    -- 6. parked groups left to give back after a raised or removed limit per key (a
    -- statement of its own for the call: Citus's rule 1)
    SELECT qs.id, qs.unpark_through INTO v_unpark_queue, v_unpark_through
      FROM "harel".queues qs
     WHERE qs.unpark_through IS NOT NULL
     ORDER BY qs.id
     LIMIT 1;
    IF v_unpark_queue IS NOT NULL THEN
        IF "harel".harel_unpark_queue(v_unpark_queue, v_unpark_through, c_unpark_rows)
           < c_unpark_rows THEN
            UPDATE "harel".queues qs
               SET unpark_through = NULL
              FROM (SELECT qq.id FROM "harel".queues qq
                     WHERE qq.id = v_unpark_queue AND qq.unpark_through = v_unpark_through
                       FOR NO KEY UPDATE SKIP LOCKED) AS locked
             WHERE qs.id = locked.id;
        END IF;
    END IF;

    -- Workflows that ended long enough ago (ADR 0040), a bounded walk a call; only once
    -- the schema held a workflow or a dependency (dependents_seen)
    IF pg_sequence_last_value('"harel".dependents_seen'::regclass) IS NOT NULL THEN
        PERFORM "harel".harel_prune_workflows();
    END IF;

    RETURN QUERY SELECT v_lowered, v_pruned, v_history;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_maintain() FROM PUBLIC;
