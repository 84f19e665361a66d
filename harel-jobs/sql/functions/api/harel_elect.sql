-- harel_elect: takes, renews or gives up a job that one worker pool does at a time
-- (migration 0011). What a worker calls; today one such job: 'depth', sampling the queue
-- depth gauges (feature `metrics`).
--
-- The job is held as a lease on its row of `elections`: p_holder takes it when nobody holds
-- it or the holder's lease has run out, and renews it while it holds it, for p_hold_ms
-- (database clock); p_hold_ms = 0 gives it up if p_holder holds it. Returns whether
-- p_holder holds it now. A holder that dies stops renewing, and another pool takes over
-- when its lease runs out. No lock outlives the call (advisory locks, which this replaces,
-- are one namespace that any login of the server can take keys in), and no transaction is
-- held open between calls (an open transaction would hold back vacuum).
CREATE OR REPLACE FUNCTION @schema@.harel_elect(p_name TEXT, p_holder UUID, p_hold_ms BIGINT)
RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now TIMESTAMPTZ := statement_timestamp();
BEGIN
    IF p_name IS DISTINCT FROM 'depth' OR p_holder IS NULL
       OR p_hold_ms NOT BETWEEN 0 AND 3600000 THEN
        RAISE EXCEPTION 'harel_elect: need the name ''depth'', a holder, and p_hold_ms in 0..3600000'
            USING ERRCODE = '22023';
    END IF;
    IF p_hold_ms = 0 THEN
        UPDATE @schema@.elections e
           SET holder = NULL, held_until = NULL
         WHERE e.name = p_name AND e.holder = p_holder;
        RETURN false;
    END IF;
    UPDATE @schema@.elections e
       SET holder = p_holder, held_until = v_now + p_hold_ms * interval '1 millisecond'
     WHERE e.name = p_name
       AND (e.holder IS NULL OR e.holder = p_holder OR e.held_until <= v_now);
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_elect(TEXT, UUID, BIGINT) FROM PUBLIC;
