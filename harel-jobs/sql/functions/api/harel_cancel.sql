-- harel_cancel: cancels one job by id. An operator's entry point (and an application's,
-- given the grant).
--
-- Takes:
--   p_id       the job's id
--   p_reason   kept with the cancelled job: at most 8,192 bytes, or NULL
--   p_keep_ms  how long the cancelled job is kept in job_history, 0 to 100 years
-- Returns what became of the job:
--   'cancelled'  it was waiting, scheduled or retrying: it ended now, as cancelled, kept in
--                job_history for p_keep_ms with p_reason, its unique key freed. It never
--                runs (again): a claim racing this call either leased it first (then it is
--                running, below) or waits for this call's transaction and finds it gone.
--                The group moves on as after an ack.
--   'requested'  it is running: the cancel is recorded on its group row. The worker's next
--                heartbeat learns it and signals the handler; whatever the handler returns,
--                the settle of its lease ends the job as cancelled (and if the worker dies
--                first, the claim that finds the lapsed lease does). Asked again, the first
--                reason stands.
--   'completed', 'dead', 'already_cancelled'
--                it had already ended so (completed: only while it is retained)
--   'not_found'  no such job (or it completed without retention, or was pruned)
-- Fence: the job is looked up again under its group's row lock; one that moved meanwhile
--   (settled, its group dropped) is looked for again, at most 5 times.
-- Locks: FOR NO KEY UPDATE of the job's group row: it waits for a claim, settle or cancel
--   holding it, and holds no other row meanwhile (its dependents' groups after it are
--   taken without waiting: harel_resolve_dependents).
-- Indexes: transport_messages_by_id; transport_groups' key (a group of its own) and
--   transport_groups_by_inline_id (a named group's first message); transport_messages' key
--   (group_id, seq); the keys of job_history and dead_letters.
-- Errors: 22023 for a missing id, a reason over 8,192 bytes or a keep period out of range;
--   40001 when the job kept moving (retry).
--
-- Steps:
--   1. Check the arguments.
--   2. Find the job's group: its message by id, its group of its own, a named group's
--      inline message. Not queued: its end from job_history or dead_letters, or
--      'not_found'.
--   3. Lock the group row (waits); gone, or the job no longer in it: next round.
--   4. The leased head with a live lease: record the request; 'requested'.
--   5. Otherwise (a head waiting, scheduled, parked, or its lease lapsed; a job behind
--      the head) it ends as cancelled (harel_cancel_waiting: a head's group moves on), and
--      the jobs waiting for it are resolved (harel_resolve_dependents).
--   6. 'cancelled'.
CREATE OR REPLACE FUNCTION @schema@.harel_cancel(
    p_id      BIGINT,
    p_reason  TEXT,
    p_keep_ms BIGINT
) RETURNS TEXT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now    TIMESTAMPTZ;
    v_group  TEXT;
    g        RECORD;
    v_state  TEXT;
BEGIN
    IF p_id IS NULL OR p_keep_ms IS NULL OR p_keep_ms NOT BETWEEN 0 AND 3155760000000
       OR octet_length(p_reason) > 8192 THEN
        RAISE EXCEPTION 'harel_cancel: need an id, a reason of at most 8192 bytes (or NULL) and a keep period of 0 to 100 years'
            USING ERRCODE = '22023';
    END IF;

    -- A few rounds at most: a job that moves (settled, its group dropped) between reading
    -- where it is and locking its group is looked for again.
    FOR round IN 1..5 LOOP
        v_group := NULL;
        SELECT t.group_id INTO v_group FROM @schema@.transport_messages t WHERE t.seq = p_id;
        IF v_group IS NULL THEN
            SELECT t.group_id INTO v_group FROM @schema@.transport_groups t
             WHERE t.group_id = 'own:' || lpad(p_id::text, 19, '0') AND t.inline_seq = p_id;
        END IF;
        IF v_group IS NULL THEN
            SELECT t.group_id INTO v_group FROM @schema@.transport_groups t
             WHERE t.inline_seq = p_id
               AND t.group_id <> 'own:' || lpad(t.inline_seq::text, 19, '0');
        END IF;
        IF v_group IS NULL THEN
            SELECT CASE h.state WHEN 'cancelled' THEN 'already_cancelled' ELSE h.state END
              INTO v_state FROM @schema@.job_history h WHERE h.id = p_id;
            IF v_state IS NULL AND EXISTS (SELECT 1 FROM @schema@.dead_letters d
                                            WHERE d.id = p_id) THEN
                v_state := 'dead';
            END IF;
            RETURN COALESCE(v_state, 'not_found');
        END IF;

        -- Waits for a claim or settle holding the group; a new statement after it sees what
        -- they committed.
        SELECT * INTO g FROM @schema@.transport_groups t
         WHERE t.group_id = v_group
           FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        v_now := clock_timestamp();
        IF g.inline_seq IS DISTINCT FROM p_id AND NOT EXISTS (
               SELECT 1 FROM @schema@.transport_messages t
                WHERE t.group_id = v_group AND t.seq = p_id) THEN
            CONTINUE;
        END IF;

        IF g.head_seq = p_id AND g.locked_by IS NOT NULL AND g.available_at > v_now THEN
            UPDATE @schema@.transport_groups t
               SET cancel_requested_at = COALESCE(t.cancel_requested_at, v_now),
                   cancel_reason = CASE WHEN t.cancel_requested_at IS NULL THEN p_reason
                                        ELSE t.cancel_reason END,
                   cancel_keep_ms = COALESCE(t.cancel_keep_ms, p_keep_ms)
             WHERE t.group_id = v_group;
            RETURN 'requested';
        END IF;

        -- Waiting, scheduled, parked for a retry, a lapsed lease, or behind its group's
        -- head: it ends now (its group moves on if it was the head), then the jobs that
        -- waited for it are resolved (cancelled in turn, or run if they asked to).
        PERFORM @schema@.harel_cancel_waiting(ARRAY[p_id], ARRAY[v_group], ARRAY[p_reason],
                                              p_keep_ms);
        PERFORM @schema@.harel_resolve_dependents(ARRAY[p_id], ARRAY['cancelled']);
        RETURN 'cancelled';
    END LOOP;
    RAISE EXCEPTION 'harel_cancel: job % kept moving; try again', p_id USING ERRCODE = '40001';
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_cancel(BIGINT, TEXT, BIGINT) FROM PUBLIC;
