-- harel_throughput: jobs succeeded, attempts failed and jobs dead-lettered per minute,
-- every worker pool together. An operator's entry point (the CLI, the dashboard).
--
-- Takes:
--   p_minutes  the last this many minutes, 1 to 1,440
-- Returns one row per minute, oldest first, zeros included (a chart needs no filling in);
--   the current minute is the last row, still filling:
--   minute, succeeded, failed, dead
-- Fence: sums saturate at the largest BIGINT (a report's counters are whatever the worker
--   role sends). STABLE.
-- Locks: none.
-- Indexes: throughput's key (minute, worker).
-- Errors: 22023 for p_minutes out of range.
CREATE OR REPLACE FUNCTION @schema@.harel_throughput(p_minutes INT)
RETURNS TABLE (
    minute    TIMESTAMPTZ,
    succeeded BIGINT,
    failed    BIGINT,
    dead      BIGINT
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
    v_last TIMESTAMPTZ := date_trunc('minute', statement_timestamp());
BEGIN
    IF p_minutes NOT BETWEEN 1 AND 1440 THEN
        RAISE EXCEPTION 'harel_throughput: p_minutes is 1 to 1440' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT m.minute,
           LEAST(COALESCE(sum(t.succeeded), 0), 9223372036854775807)::bigint,
           LEAST(COALESCE(sum(t.failed), 0), 9223372036854775807)::bigint,
           LEAST(COALESCE(sum(t.dead), 0), 9223372036854775807)::bigint
      FROM generate_series(v_last - (p_minutes - 1) * interval '1 minute', v_last,
                           interval '1 minute') AS m(minute)
      LEFT JOIN @schema@.throughput t ON t.minute = m.minute
     GROUP BY m.minute
     ORDER BY m.minute;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_throughput(INT) FROM PUBLIC;
