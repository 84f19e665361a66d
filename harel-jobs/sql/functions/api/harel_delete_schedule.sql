-- harel_delete_schedule: forgets a schedule (migration 0011), its last tick with it. What an
-- operator calls for a schedule no worker declares any more (a schema holds at most 1,000).
-- A worker that still declares it records it again at its next start or tick, as new: its
-- missed ticks are then the ones after that declaration. Returns whether it existed.
CREATE OR REPLACE FUNCTION @schema@.harel_delete_schedule(p_name TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM @schema@.schedules s WHERE s.name = p_name;
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_delete_schedule(TEXT) FROM PUBLIC;
