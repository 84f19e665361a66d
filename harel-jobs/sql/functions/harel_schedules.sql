-- harel_schedules: the schedules workers declared, by name, with their last and next tick.
-- What a worker reads at start-up (its own, by p_names) and an operator lists (p_names
-- NULL: all, at most 10,000). One round trip.
CREATE OR REPLACE FUNCTION @schema@.harel_schedules(p_names TEXT[])
RETURNS TABLE (
    name       TEXT,
    spec       TEXT,
    last_tick  TIMESTAMPTZ,
    next_tick  TIMESTAMPTZ,
    updated_at TIMESTAMPTZ
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_names IS NULL THEN
        RETURN QUERY
        SELECT s.name, s.spec, s.last_tick, s.next_tick, s.updated_at
          FROM @schema@.schedules s
         ORDER BY s.name
         LIMIT 10000;
    ELSE
        RETURN QUERY
        SELECT s.name, s.spec, s.last_tick, s.next_tick, s.updated_at
          FROM @schema@.schedules s
         WHERE s.name = ANY (p_names)
         ORDER BY s.name;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_schedules(TEXT[]) FROM PUBLIC;
