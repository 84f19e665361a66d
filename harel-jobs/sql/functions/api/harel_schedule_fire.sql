-- harel_schedule_fire: enqueues the job of one tick of a periodic schedule, unless another
-- worker already did; or declares the schedule. A worker's entry point (its scheduler).
--
-- Takes:
--   p_name        the schedule's name, 1 to 255 bytes
--   p_spec        how it is declared (cron expression and time zone, or interval), at most
--                 1,024 bytes
--   p_tick        the tick to fire; NULL: a declaration only (a worker starting with
--                 nothing missed to enqueue), which records the schedule, its spec and its
--                 next tick
--   p_next_tick   the tick after it, as the worker computed it
--   p_group, p_kind, p_payload, p_priority, p_queue, p_unique_key, p_unique_hold_ms
--                 the job, as harel_publish takes them (p_queue NULL: 'default')
--   p_trigger     NULL: p_tick is a tick of the schedule. Else an operator's request to
--                 fire it now (harel_schedule_control 'trigger'), as harel_schedules showed
--                 it: the job is enqueued if that request is still the row's (it is cleared
--                 in the same statement: one worker fires it) and the schedule is not
--                 paused; last_tick and next_tick do not move
-- Returns: the job's id; for a unique job that is a duplicate of a queued one, the holder's
--   id negated (the tick still counts as fired); NULL if this tick (or a later one) was
--   already enqueued, for a tick of a paused schedule (it counts as passed: last_tick
--   moves on, no job), for a trigger already fired (or dropped by a pause), and for a
--   declaration; 0, writing nothing, for a tick more than a second ahead of the
--   database's clock.
-- Fence: the schedule's last_tick only moves forward, and the job is published in the same
--   transaction: one job per tick, never none once the row moved. Ticks fire by each
--   worker's clock, but a worker whose clock runs ahead cannot move the schedule past ticks
--   the others have yet to fire. At most 1,000 schedules: a new name past that is refused
--   (concurrent declarations of new names may pass the cap by a few). A role with EXECUTE
--   on it can enqueue any job (as harel_publish checks it) once per new tick of a schedule
--   name: grant it only to roles you would let enqueue.
-- Locks: the schedule's row (its upsert): two workers firing the same tick are serialised,
--   and the second finds it done; then harel_publish's.
-- Indexes: schedules' key.
-- Errors: 22023 for a name or spec out of range; 54000 for a new name past 1,000 schedules
--   (an operator removes old ones with harel_delete_schedule); harel_publish's.
--
-- Steps:
--   1. Check the name and spec; a tick ahead of the database's clock: return 0.
--   2. A new name: refused past the cap.
--   3. A declaration: upsert the spec and next tick; return NULL.
--   4. A trigger: clear the row's request if it is still p_trigger and the schedule is
--      not paused; not cleared: return NULL.
--   5. A tick: move the row's last tick to p_tick if it is older (insert the row if new);
--      not moved, or the schedule paused: return NULL.
--   6. Publish the job (harel_publish); return its id.
CREATE OR REPLACE FUNCTION @schema@.harel_schedule_fire(
    p_name      TEXT,
    p_spec      TEXT,
    p_tick      TIMESTAMPTZ,
    p_next_tick TIMESTAMPTZ,
    p_group     TEXT,
    p_kind      TEXT,
    p_payload   TEXT,
    p_priority  SMALLINT,
    p_queue          TEXT DEFAULT NULL,
    p_unique_key     TEXT DEFAULT NULL,
    p_unique_hold_ms BIGINT DEFAULT NULL,
    p_trigger        TIMESTAMPTZ DEFAULT NULL
) RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_id     BIGINT;
    v_paused TIMESTAMPTZ;
    -- (the time in a variable: Citus takes a function in an upsert's DO UPDATE SET, or a
    -- modification's CASE, only if it is immutable; a parameter it takes)
    v_now    TIMESTAMPTZ := statement_timestamp();
    c_max_schedules CONSTANT INT := 1000;
BEGIN
    IF p_name IS NULL OR octet_length(p_name) NOT BETWEEN 1 AND 255
       OR p_spec IS NULL OR octet_length(p_spec) > 1024 THEN
        RAISE EXCEPTION 'harel_schedule_fire: need a name of 1 to 255 bytes and a spec of at most 1024'
            USING ERRCODE = '22023';
    END IF;

    IF p_tick > clock_timestamp() + interval '1 second' THEN
        RETURN 0::bigint;
    END IF;

    -- a new name: only under the cap (concurrent declarations of new names may pass it by a
    -- few; it bounds what the table holds, not an exact count)
    IF NOT EXISTS (SELECT 1 FROM @schema@.schedules s WHERE s.name = p_name)
       AND (SELECT count(*) FROM (SELECT 1 FROM @schema@.schedules s
                                   LIMIT c_max_schedules) AS c) >= c_max_schedules THEN
        RAISE EXCEPTION 'harel_schedule_fire: a schema holds at most 1000 schedules (delete the ones no worker declares any more)'
            USING ERRCODE = '54000';
    END IF;

    IF p_tick IS NULL THEN
        INSERT INTO @schema@.schedules AS s (name, spec, next_tick)
        VALUES (p_name, p_spec, p_next_tick)
        ON CONFLICT (name) DO UPDATE
           SET spec = excluded.spec, updated_at = v_now,
               next_tick = excluded.next_tick;
        RETURN NULL;
    END IF;

    IF p_trigger IS NOT NULL THEN
        -- the row lock serialises workers claiming the same request: the second finds it
        -- cleared
        UPDATE @schema@.schedules s
           SET trigger_requested_at = NULL, updated_at = v_now
         WHERE s.name = p_name AND s.trigger_requested_at = p_trigger
           AND s.paused_at IS NULL;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    ELSE
        -- a paused schedule's tick passes without a job, so no worker fires it later
        INSERT INTO @schema@.schedules AS s (name, spec, last_tick, next_tick)
        VALUES (p_name, p_spec, p_tick, p_next_tick)
        ON CONFLICT (name) DO UPDATE
           SET last_tick = excluded.last_tick, next_tick = excluded.next_tick,
               spec = excluded.spec, updated_at = v_now
         WHERE s.last_tick IS NULL OR s.last_tick < excluded.last_tick
        RETURNING s.paused_at INTO v_paused;
        IF NOT FOUND OR v_paused IS NOT NULL THEN
            RETURN NULL;
        END IF;
    END IF;

    SELECT p.s INTO v_id
      FROM @schema@.harel_publish(ARRAY[p_group], ARRAY[p_kind], ARRAY[p_payload],
                                  ARRAY[p_priority], ARRAY[NULL::timestamptz],
                                  ARRAY[NULL::bigint],
                                  CASE WHEN p_unique_key IS NOT NULL
                                       THEN ARRAY[p_unique_key] END,
                                  CASE WHEN p_unique_key IS NOT NULL
                                       THEN ARRAY[p_unique_hold_ms] END,
                                  CASE WHEN p_queue IS NOT NULL
                                       THEN ARRAY[p_queue] END) AS p(s);
    RETURN v_id;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_schedule_fire(
    TEXT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ, TEXT, TEXT, TEXT, SMALLINT, TEXT, TEXT, BIGINT,
    TIMESTAMPTZ) FROM PUBLIC;
