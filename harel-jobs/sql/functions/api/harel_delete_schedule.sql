-- harel_delete_schedule: forgets a schedule, its last tick with it. An operator's entry
-- point, for a schedule no worker declares any more (a schema holds at most 1,000).
--
-- Takes:
--   p_name  the schedule's name
-- Returns: whether it existed.
-- Fence: none. A worker that still declares it records it again at its next start or tick,
--   as new: its missed ticks are then the ones after that declaration.
-- Locks: the schedule's row (deleted; waits for a worker firing it).
-- Indexes: schedules' key.
-- Errors: none of its own.
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
