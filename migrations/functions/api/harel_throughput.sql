-- harel_throughput: jobs succeeded, attempts failed and jobs dead-lettered per minute over
-- the last p_minutes minutes (1 to 1,440), every worker pool together, oldest first; the
-- current minute is the last row, still filling (migration 0008). One row per minute, zeros
-- included, so a chart needs no filling in. Sums saturate at the largest BIGINT (a report's
-- counters are whatever the worker role sends: migration 0011).
CREATE OR REPLACE FUNCTION "harel".harel_throughput(p_minutes INT)
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
      LEFT JOIN "harel".throughput t ON t.minute = m.minute
     GROUP BY m.minute
     ORDER BY m.minute;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_throughput(INT) FROM PUBLIC;
