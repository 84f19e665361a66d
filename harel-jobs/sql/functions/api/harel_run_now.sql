-- harel_run_now: makes a queued job that waits for its own time due now: a retrying job
-- (its group parked until its backoff ends) or a scheduled one (enqueued with a delay or a
-- run-at time). An operator's entry point (the dashboard's "Run now", `jobs run-now`).
--
-- Takes:
--   p_id  the job's id
-- Returns what became of the job:
--   'due'          it was its group's head, parked for a retry or until its not-before
--                  time: its group is ready now, tagged as a group that becomes due is
--                  (harel_move_on's way: harel_fair_tags), and idle workers are woken
--                  (harel_notify). It starts at the next claim, as the queue's pause,
--                  limits and fair share allow.
--   'behind'       it waits behind the jobs before it in its group: its not-before time is
--                  dropped, so it starts as soon as its turn comes (FIFO in its group kept)
--   'running'      its group is leased at it (a live lease): refused
--   'not_waiting'  it is queued but waits for no time of its own: due already, pending
--                  (it waits for other jobs), held by a lapsed lease, delayed by its
--                  queue's rate or a snooze (its group given back without an attempt), or
--                  waiting under a limit per key: refused, nothing changed
--   'finished'     it completed, is a dead letter, or was cancelled
--   'not_found'    no such job (or it completed without retention, or was pruned)
-- Fence: the job is looked up again under its group's row lock; one that moved meanwhile
--   (settled, its group dropped) is looked for again, at most 5 times.
-- Locks: FOR NO KEY UPDATE of the job's group row, as harel_cancel: it waits for a claim,
--   settle or cancel holding it, and holds no other row meanwhile.
-- Indexes: transport_messages_by_id; transport_groups' key (a group of its own) and
--   transport_groups_by_inline_id (a named group's first message); transport_messages' key
--   (group_id, seq); the keys of job_history and dead_letters.
-- Errors: 22023 for a missing id; 40001 when the job kept moving (retry).
--
-- Steps:
--   1. Check the argument.
--   2. Find the job's group (as harel_cancel): its message by id, its group of its own, a
--      named group's inline message. Not queued: 'finished' or 'not_found'.
--   3. Lock the group row (waits); gone, or the job no longer in it: next round.
--   4. The head: leased with a live lease: 'running'. Timed (no tag), not leased, parked
--      until later, not pending, and waiting for its own time (an attempt failed, or its
--      not-before is later): the row due now with its tag, the head's not-before dropped,
--      the workers woken; 'due'. Otherwise 'not_waiting'.
--   5. Behind the head: a not-before later than now (not pending) dropped: 'behind';
--      otherwise 'not_waiting'.
CREATE OR REPLACE FUNCTION @schema@.harel_run_now(p_id BIGINT) RETURNS TEXT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- (the tag in a scalar variable: an UPDATE that sets a column from a subscripted PL/pgSQL
    -- array crashed the Citus coordinator, signal 11)
    v_tag       BIGINT;
    -- a pending job's not-before (harel_publish, ADR 0033)
    c_pending   CONSTANT TIMESTAMPTZ := timestamptz '9999-12-31 00:00:00+00';
    -- where harel_notify places a ready group: its tag less this
    c_hint_base CONSTANT BIGINT := 4611686018427387904;
    v_now        TIMESTAMPTZ;
    v_group      TEXT;
    v_is_head    BOOLEAN;
    v_not_before TIMESTAMPTZ;
    v_tags       BIGINT[];
    g            RECORD;
BEGIN
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'harel_run_now: need a job id' USING ERRCODE = '22023';
    END IF;

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
            IF EXISTS (SELECT 1 FROM @schema@.job_history h WHERE h.id = p_id)
               OR EXISTS (SELECT 1 FROM @schema@.dead_letters d WHERE d.id = p_id) THEN
                RETURN 'finished';
            END IF;
            RETURN 'not_found';
        END IF;

        -- Waits for a claim or settle holding the group; a new statement after it sees what
        -- they committed.
        SELECT * INTO g FROM @schema@.transport_groups t
         WHERE t.group_id = v_group
           FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        v_now := clock_timestamp();
        v_not_before := NULL;
        IF g.inline_seq = p_id THEN
            v_is_head := true;
            v_not_before := g.inline_not_before;
        ELSE
            SELECT t.not_before INTO v_not_before FROM @schema@.transport_messages t
             WHERE t.group_id = v_group AND t.seq = p_id;
            CONTINUE WHEN NOT FOUND;
            v_is_head := g.inline_seq IS NULL AND p_id = (
                SELECT f.seq FROM @schema@.transport_messages f
                 WHERE f.group_id = v_group ORDER BY f.seq LIMIT 1);
        END IF;

        IF NOT v_is_head THEN
            IF v_not_before IS NULL OR v_not_before <= v_now OR v_not_before >= c_pending THEN
                RETURN 'not_waiting';
            END IF;
            UPDATE @schema@.transport_messages t SET not_before = NULL
             WHERE t.group_id = v_group AND t.seq = p_id;
            RETURN 'behind';
        END IF;

        IF g.locked_by IS NOT NULL AND g.available_at > v_now THEN
            RETURN 'running';
        END IF;
        -- only a timed row parked for the job's own time: a retry's backoff (an attempt was
        -- counted) or its not-before; never a pending job, a ready one, a lapsed lease, or
        -- a delay of its queue's rate or a snooze
        IF g.locked_by IS NOT NULL OR g.fair_tag IS NOT NULL OR g.available_at <= v_now
           OR v_not_before >= c_pending
           OR NOT (g.head_attempts > 0 OR v_not_before > v_now) THEN
            RETURN 'not_waiting';
        END IF;
        v_tags := @schema@.harel_fair_tags(ARRAY[g.queue_id], ARRAY[g.priority],
                                           ARRAY[g.fair_key]);
        v_tag := v_tags[1];
        UPDATE @schema@.transport_groups t
           SET available_at = v_now, fair_tag = v_tag,
               inline_not_before = CASE WHEN t.inline_seq = p_id THEN NULL
                                        ELSE t.inline_not_before END
         WHERE t.group_id = v_group;
        IF g.inline_seq IS DISTINCT FROM p_id THEN
            UPDATE @schema@.transport_messages t SET not_before = NULL
             WHERE t.group_id = v_group AND t.seq = p_id;
        END IF;
        PERFORM @schema@.harel_notify(v_tags[1] - c_hint_base);
        RETURN 'due';
    END LOOP;
    RAISE EXCEPTION 'harel_run_now: job % kept moving; try again', p_id USING ERRCODE = '40001';
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_run_now(BIGINT) FROM PUBLIC;
