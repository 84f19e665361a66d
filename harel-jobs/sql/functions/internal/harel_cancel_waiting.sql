-- harel_cancel_waiting: ends queued jobs that are not running as cancelled, in groups the
-- caller holds: a group's head through harel_end_cancelled (the group moves on), a job
-- behind it by deleting its message. It does not resolve the jobs' own dependents: the
-- caller does (harel_resolve_dependents, which cascades a round at a time within its
-- budget; harel_cancel). Internal: called by harel_resolve_dependents (dependents whose
-- parent failed) and harel_cancel.
--
-- Takes, one element per job:
--   p_jobs     its id
--   p_groups   its group (the caller holds its row FOR NO KEY UPDATE)
--   p_reasons  kept with the cancelled job
-- and:
--   p_keep_ms  how long they are kept in job_history (NULL: 7 days, Client::cancel's
--              default)
-- Returns: nothing.
-- Fence: none of its own: the caller holds the rows and decided. A job no longer in its
--   group (ended meanwhile) is left alone; one already in job_history is not recorded
--   again.
-- Locks: none beyond the caller's (and harel_end_cancelled's, harel_release_key's).
-- Indexes: transport_groups' key; transport_messages' key (group_id, seq); job_history's
--   key.
-- Errors: none of its own.
--
-- Steps:
--   1. The common case, set-based: a job alone in a group of its own (such a group holds
--      only its job), not running, without a unique key: its group row deleted, recorded
--      in job_history as cancelled (with its reason, kept p_keep_ms).
--   Then the others, per job in group and job order (scalar statements: each looks its
--   rows up by key):
--   2. Behind its group's head: its message deleted, recorded in job_history as cancelled
--      (with its reason, kept p_keep_ms), its unique key freed.
--   3. Its group's head (waiting, scheduled, parked, or a lapsed lease: never a running
--      one, which the caller asks to stop instead): the cancel recorded on the group row
--      and the head ended (harel_end_cancelled, leaving the resolution to the caller).
CREATE OR REPLACE FUNCTION @schema@.harel_cancel_waiting(
    p_jobs    BIGINT[],
    p_groups  TEXT[],
    p_reasons TEXT[],
    p_keep_ms BIGINT DEFAULT NULL
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- how long a job cancelled for its parent is kept (Client::cancel's default)
    c_keep_ms CONSTANT BIGINT := 604800000::bigint;
    v_keep_ms BIGINT := COALESCE(p_keep_ms, c_keep_ms);
    v_now     TIMESTAMPTZ := clock_timestamp();
    x         RECORD;
    g         RECORD;
    m         RECORD;
    v_queue   TEXT;
    v_ids        BIGINT[];
    v_groups     TEXT[];
    v_kinds      TEXT[];
    v_payloads   TEXT[];
    v_priorities SMALLINT[];
    v_errors     TEXT[];
    v_enqueued   TIMESTAMPTZ[];
    v_queues     SMALLINT[];
    v_keys       TEXT[];
    v_reasons    TEXT[];
BEGIN
    -- A job alone in a group of its own (the common dependent), set-based: its row goes, and
    -- with it the job. (The row's delete RETURNING into arrays, the history from them: Citus
    -- mishandles an INSERT fed by a data-modifying CTE.)
    WITH gone AS (
        DELETE FROM @schema@.transport_groups g
         USING unnest(p_jobs, p_groups, p_reasons) AS x(job, group_id, reason)
         CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.transport_groups t
                              WHERE t.group_id = x.group_id OFFSET 0) AS k
         WHERE g.ctid = k.row_ctid
           AND x.group_id = 'own:' || lpad(x.job::text, 19, '0')
           AND g.inline_seq = x.job AND g.locked_by IS NULL
           AND g.inline_unique_key IS NULL
        RETURNING g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
                  g.inline_last_error, g.inline_enqueued_at, g.queue_id, g.fair_key, x.reason
    )
    SELECT array_agg(d.inline_seq), array_agg(d.group_id), array_agg(d.inline_kind),
           array_agg(d.inline_payload::text), array_agg(d.priority),
           array_agg(d.inline_last_error), array_agg(d.inline_enqueued_at),
           array_agg(d.queue_id), array_agg(d.fair_key), array_agg(d.reason)
      INTO v_ids, v_groups, v_kinds, v_payloads, v_priorities, v_errors, v_enqueued,
           v_queues, v_keys, v_reasons
      FROM gone d;
    IF v_ids IS NOT NULL THEN
        INSERT INTO @schema@.job_history
               (id, group_id, kind, payload, priority, state, attempts, last_error,
                enqueued_at, started_at, finished_at, cancel_reason, keep_until, queue,
                fair_key)
        SELECT d.id, d.group_id, d.kind, d.payload::json, d.priority, 'cancelled', 0,
               d.last_error, d.enqueued_at, NULL, v_now, d.reason,
               v_now + v_keep_ms * interval '1 millisecond',
               (SELECT qs.name FROM @schema@.queues qs WHERE qs.id = d.queue_id), d.fair_key
          FROM unnest(v_ids, v_groups, v_kinds, v_payloads, v_priorities, v_errors,
                      v_enqueued, v_queues, v_keys, v_reasons)
               AS d(id, group_id, kind, payload, priority, last_error, enqueued_at,
                    queue_id, fair_key, reason)
        ON CONFLICT (id) DO NOTHING;
    END IF;

    FOR x IN SELECT u.job, u.group_id, u.reason
               FROM unnest(p_jobs, p_groups, p_reasons) AS u(job, group_id, reason)
              WHERE NOT (u.job = ANY (COALESCE(v_ids, '{}')))
              ORDER BY u.group_id, u.job LOOP
        SELECT * INTO g FROM @schema@.transport_groups t WHERE t.group_id = x.group_id;
        CONTINUE WHEN NOT FOUND;
        IF g.inline_seq = x.job OR (g.inline_seq IS NULL AND x.job = (
               SELECT f.seq FROM @schema@.transport_messages f
                WHERE f.group_id = x.group_id ORDER BY f.seq LIMIT 1)) THEN
            -- its group's head: the group moves on
            UPDATE @schema@.transport_groups t
               SET cancel_requested_at = v_now, cancel_reason = x.reason,
                   cancel_keep_ms = v_keep_ms
             WHERE t.group_id = x.group_id;
            PERFORM @schema@.harel_end_cancelled(ARRAY[x.group_id], false);
        ELSE
            -- behind the head: only the message goes
            m := NULL;
            DELETE FROM @schema@.transport_messages t
             WHERE t.group_id = x.group_id AND t.seq = x.job
            RETURNING t.* INTO m;
            CONTINUE WHEN m.seq IS NULL;
            -- (read on its own: Citus takes no subquery in an INSERT … VALUES)
            SELECT qs.name INTO v_queue FROM @schema@.queues qs WHERE qs.id = g.queue_id;
            INSERT INTO @schema@.job_history
                   (id, group_id, kind, payload, priority, state, attempts, last_error,
                    enqueued_at, started_at, finished_at, cancel_reason, keep_until, queue,
                    fair_key)
            VALUES (m.seq, m.group_id, m.kind, m.payload, m.priority, 'cancelled',
                    m.attempts, m.last_error, m.enqueued_at, NULL, v_now, x.reason,
                    v_now + v_keep_ms * interval '1 millisecond', v_queue, g.fair_key)
            ON CONFLICT (id) DO NOTHING;
            IF m.unique_key IS NOT NULL THEN
                PERFORM @schema@.harel_release_key(m.unique_key, m.seq, false);
            END IF;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_cancel_waiting(BIGINT[], TEXT[], TEXT[], BIGINT)
    FROM PUBLIC;
