-- harel_elect: takes, renews or gives up a task that one worker pool does at a time, held
-- as a lease on its row of `elections`. A worker's entry point; today one such task:
-- 'depth', sampling the queue depth gauges (feature `metrics`).
--
-- Takes:
--   p_name     the task: 'depth'
--   p_holder   the pool asking
--   p_hold_ms  the lease, 1 ms to 1 h from the database's clock; 0 gives the task up
-- Returns: whether p_holder holds the task now.
-- Fence: p_holder takes it when nobody holds it or the holder's lease has run out, and
--   renews it while it holds it; giving up applies only to the holder. A holder that dies
--   stops renewing, and another pool takes over when its lease runs out.
-- Locks: the task's row, by one UPDATE (a concurrent call for the same task waits for it);
--   no lock outlives the caller's transaction, and none is held between calls (an open
--   transaction would hold back vacuum).
-- Indexes: elections' key.
-- Errors: 22023 for another name, no holder, or p_hold_ms out of range.
CREATE OR REPLACE FUNCTION "harel".harel_elect(p_name TEXT, p_holder UUID, p_hold_ms BIGINT)
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
        UPDATE "harel".elections e
           SET holder = NULL, held_until = NULL
         WHERE e.name = p_name AND e.holder = p_holder;
        RETURN false;
    END IF;
    UPDATE "harel".elections e
       SET holder = p_holder, held_until = v_now + p_hold_ms * interval '1 millisecond'
     WHERE e.name = p_name
       AND (e.holder IS NULL OR e.holder = p_holder OR e.held_until <= v_now);
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_elect(TEXT, UUID, BIGINT) FROM PUBLIC;
