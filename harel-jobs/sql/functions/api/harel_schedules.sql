-- harel_schedules: the schedules workers declared, by name, with their last and next tick.
-- What a worker reads at start-up (its own, by p_names) and an operator lists (p_names
-- NULL), one round trip.
--
-- An operator's listing is a page (migration 0011): at most p_limit schedules (1 to 1,000)
-- after the name p_after (NULL: from the first), by name, and each row carries `total`, the
-- number of schedules in the schema (at most 1,000 unless an older release wrote more), so
-- nothing is dropped without saying so. A worker's read of its own names is not paged (a
-- pool declares at most 1,000).
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
    total      BIGINT
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
        SELECT s.name, s.spec, s.last_tick, s.next_tick, s.updated_at, v_total
          FROM @schema@.schedules s
         WHERE p_after IS NULL OR s.name > p_after
         ORDER BY s.name
         LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT s.name, s.spec, s.last_tick, s.next_tick, s.updated_at,
               cardinality(p_names)::bigint
          FROM @schema@.schedules s
         WHERE s.name = ANY (p_names)
         ORDER BY s.name;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_schedules(TEXT[], TEXT, INT) FROM PUBLIC;
