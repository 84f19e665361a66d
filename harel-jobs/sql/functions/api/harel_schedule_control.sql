-- harel_schedule_control: an operator pauses, resumes or triggers a periodic schedule. An
-- operator's entry point.
--
-- Takes:
--   p_name    the schedule's name
--   p_action  'pause': no tick of it is enqueued until resumed (harel_schedule_fire lets
--               each one pass without a job), and a trigger not yet fired is dropped;
--             'resume': its ticks are enqueued again, from the next one to come: its
--               last_tick moves to at least now, so the ticks that passed while paused are
--               never counted as missed (no catch-up, by any worker, started or not);
--             'trigger': asks for one job now, besides its ticks; the next pass of a
--               worker declaring it makes and enqueues the job (harel_schedule_fire's
--               p_trigger), once. Asked again before it fired, the first request stands
--               (one job). Refused for a paused schedule.
-- Returns:
--   'done'       the change was made
--   'unchanged'  nothing to do: already paused (pause), not paused (resume), a trigger
--                already waiting (trigger)
--   'paused'     trigger only: the schedule is paused; nothing was written
--   'not_found'  no schedule of that name (nothing is created)
-- Fence: none: the row's lock orders it with the workers' harel_schedule_fire.
-- Locks: the schedule's row (FOR UPDATE: waits for a worker firing it).
-- Indexes: schedules' key.
-- Errors: 22023 for a missing name or an unknown action.
CREATE OR REPLACE FUNCTION @schema@.harel_schedule_control(
    p_name   TEXT,
    p_action TEXT
) RETURNS TEXT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    s RECORD;
    v_now TIMESTAMPTZ;
BEGIN
    IF p_name IS NULL OR p_action IS NULL OR p_action NOT IN ('pause', 'resume', 'trigger') THEN
        RAISE EXCEPTION 'harel_schedule_control: need a name, and an action of pause, resume or trigger'
            USING ERRCODE = '22023';
    END IF;

    SELECT * INTO s FROM @schema@.schedules t WHERE t.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    -- (the time taken once the row is ours, into a variable: Citus takes no volatile
    -- function in an UPDATE)
    v_now := clock_timestamp();

    IF p_action = 'pause' THEN
        IF s.paused_at IS NOT NULL THEN
            RETURN 'unchanged';
        END IF;
        UPDATE @schema@.schedules t
           SET paused_at = v_now, trigger_requested_at = NULL
         WHERE t.name = p_name;
    ELSIF p_action = 'resume' THEN
        IF s.paused_at IS NULL THEN
            RETURN 'unchanged';
        END IF;
        -- the ticks that passed while paused are not missed ones: the next is the next
        -- to come
        UPDATE @schema@.schedules t
           SET paused_at = NULL,
               last_tick = GREATEST(t.last_tick, v_now)
         WHERE t.name = p_name;
    ELSE
        IF s.paused_at IS NOT NULL THEN
            RETURN 'paused';
        END IF;
        IF s.trigger_requested_at IS NOT NULL THEN
            RETURN 'unchanged';
        END IF;
        UPDATE @schema@.schedules t
           SET trigger_requested_at = v_now
         WHERE t.name = p_name;
    END IF;
    RETURN 'done';
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_schedule_control(TEXT, TEXT) FROM PUBLIC;
