-- harel_queue_id: a named queue's id for an operator's change to it: created if asked for,
-- else it must exist. Internal: called by harel_set_queue, harel_set_key_limits and
-- harel_set_fair_weight.
--
-- Takes:
--   p_name    the queue's name
--   p_create  true: created if nothing was published into it yet (harel_ensure_queue);
--             false: an unknown name is refused (a typo must not make a paused or
--             limited queue that no job ever goes to)
-- Returns the queue's id.
-- Fence: none.
-- Locks: harel_ensure_queue's when it creates the queue; none otherwise.
-- Indexes: queues' name.
-- Errors: P0002 for an unknown name when p_create is false; harel_ensure_queue's.
CREATE OR REPLACE FUNCTION @schema@.harel_queue_id(p_name TEXT, p_create BOOLEAN)
RETURNS SMALLINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_id SMALLINT;
BEGIN
    IF COALESCE(p_create, true) THEN
        RETURN @schema@.harel_ensure_queue(p_name);
    END IF;
    SELECT q.id INTO v_id FROM @schema@.queues q WHERE q.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no queue named %', left(p_name, 64)
            USING ERRCODE = 'P0002',
                  HINT = 'a queue exists once a job went to it, or once created on purpose';
    END IF;
    RETURN v_id;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_queue_id(TEXT, BOOLEAN) FROM PUBLIC;
