-- harel_release_waiting: gives a job whose parents have all ended its own start time back
-- (ADR 0033): until now it was not due before the pending time. Internal: called by
-- harel_resolve_dependents.
--
-- Takes:
--   p_job         the job's id
--   p_not_before  the start time it asked for when enqueued (NULL: at once)
-- Returns: nothing.
-- Fence: the job is looked up again under its group's row lock; a job no longer queued
--   (cancelled meanwhile) is left alone.
-- Locks: FOR NO KEY UPDATE of the job's group row: it waits for a claim, settle or cancel
--   holding it.
-- Indexes: transport_messages_by_id, transport_groups' key and
--   transport_groups_by_inline_id (a job by id); transport_messages' key (group_id, seq);
--   harel_fair_tags' probes.
-- Errors: 40001 when the job kept moving (the caller's transaction retries).
--
-- Steps:
--   1. Find the job's group and lock its row; the job no longer in it: next round.
--   2. Its not-before time set to p_not_before (the group row's for its inline message,
--      else its message's).
--   3. If it is the head of a free group (which then waits for it, timed at the pending
--      time): the group becomes due at that time, tagged into the ready domain if it is due
--      now (harel_fair_tags), and idle workers are woken (harel_notify). Otherwise the
--      group's lease or park is left alone: the settle that moves it on meets the job.
CREATE OR REPLACE FUNCTION "harel".harel_release_waiting(
    p_job        BIGINT,
    p_not_before TIMESTAMPTZ
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- a tag's position in a NOTIFY (see harel_notify)
    c_hint_base CONSTANT BIGINT := 4611686018427387904;
    v_now   TIMESTAMPTZ;
    v_group TEXT;
    v_head  BOOLEAN;
    v_tags  BIGINT[];
    g       RECORD;
BEGIN
    FOR round IN 1..5 LOOP
        v_group := COALESCE(
            (SELECT m.group_id FROM "harel".transport_messages m WHERE m.seq = p_job),
            (SELECT t.group_id FROM "harel".transport_groups t
              WHERE t.group_id = 'own:' || lpad(p_job::text, 19, '0') AND t.inline_seq = p_job),
            (SELECT t.group_id FROM "harel".transport_groups t
              WHERE t.inline_seq = p_job
                AND t.group_id <> 'own:' || lpad(t.inline_seq::text, 19, '0')));
        IF v_group IS NULL THEN
            RETURN;
        END IF;
        SELECT * INTO g FROM "harel".transport_groups t
         WHERE t.group_id = v_group
           FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        v_now := clock_timestamp();

        IF g.inline_seq = p_job THEN
            UPDATE "harel".transport_groups t SET inline_not_before = p_not_before
             WHERE t.group_id = v_group;
            v_head := true;
        ELSE
            UPDATE "harel".transport_messages m SET not_before = p_not_before
             WHERE m.group_id = v_group AND m.seq = p_job;
            CONTINUE WHEN NOT FOUND;
            v_head := g.inline_seq IS NULL AND p_job = (
                SELECT f.seq FROM "harel".transport_messages f
                 WHERE f.group_id = v_group ORDER BY f.seq LIMIT 1);
        END IF;

        IF v_head AND g.locked_by IS NULL THEN
            IF p_not_before IS NULL OR p_not_before <= v_now THEN
                v_tags := "harel".harel_fair_tags(ARRAY[g.queue_id], ARRAY[g.priority],
                                                   ARRAY[g.fair_key]);
            END IF;
            UPDATE "harel".transport_groups t
               SET available_at = GREATEST(v_now, p_not_before), fair_tag = v_tags[1]
             WHERE t.group_id = v_group;
            IF v_tags IS NOT NULL THEN
                PERFORM "harel".harel_notify(v_tags[1] - c_hint_base);
            END IF;
        END IF;
        RETURN;
    END LOOP;
    RAISE EXCEPTION 'harel_release_waiting: job % kept moving; try again', p_job
        USING ERRCODE = '40001';
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_release_waiting(BIGINT, TIMESTAMPTZ) FROM PUBLIC;
