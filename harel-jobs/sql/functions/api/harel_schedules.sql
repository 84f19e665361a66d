-- harel_schedules: the schedules workers declared, by name, with their last and next tick.
-- What a worker reads at start-up (its own, by name) and an operator lists (a page); an
-- entry point of both.
--
-- Takes:
--   p_names  the schedules a worker declares (at most 1,000; not paged), or NULL for an
--            operator's page
--   p_after  the page starts after this name (NULL: from the first)
--   p_limit  at most this many schedules in a page, 1 to 1,000
-- Returns one row per schedule, by name:
--   name, spec, last_tick, next_tick, updated_at
--   paused_at             when an operator paused it (NULL: not paused)
--   trigger_requested_at  an operator's request to fire it now, not yet fired (NULL: none)
--   total  for a page, the number of schedules in the schema (about 1,000 at most:
--          harel_schedule_fire's cap), so nothing is left out without saying so; for
--          p_names, the number of names asked for
-- Fence: none: it reads. STABLE.
-- Locks: none.
-- Indexes: schedules' key (the count is an index-only count of at most about 1,000 rows).
-- Errors: 22023 for p_limit out of range or more than 1,000 names.
CREATE OR REPLACE FUNCTION @schema@.harel_schedules(
    p_names TEXT[],
    p_after TEXT DEFAULT NULL,
    p_limit INT DEFAULT 1000
) RETURNS TABLE (
    name       TEXT,
    spec       TEXT,
    last_tick  TIMESTAMPTZ,
    next_tick  TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    total      BIGINT,
    paused_at  TIMESTAMPTZ,
    trigger_requested_at TIMESTAMPTZ
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_total BIGINT;
BEGIN
    IF p_limit NOT BETWEEN 1 AND 1000 OR cardinality(p_names) > 1000 THEN
        RAISE EXCEPTION 'harel_schedules: p_limit is 1 to 1000, and at most 1000 names'
            USING ERRCODE = '22023';
    END IF;
    IF p_names IS NULL THEN
        -- (an index-only count of a table of at most about 1,000 rows)
        SELECT count(*) INTO v_total FROM @schema@.schedules s;
        RETURN QUERY
        SELECT s.name, s.spec, s.last_tick, s.next_tick, s.updated_at, v_total,
               s.paused_at, s.trigger_requested_at
          FROM @schema@.schedules s
         WHERE p_after IS NULL OR s.name > p_after
         ORDER BY s.name
         LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT s.name, s.spec, s.last_tick, s.next_tick, s.updated_at,
               cardinality(p_names)::bigint, s.paused_at, s.trigger_requested_at
          FROM @schema@.schedules s
         WHERE s.name = ANY (p_names)
         ORDER BY s.name;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_schedules(TEXT[], TEXT, INT) FROM PUBLIC;
