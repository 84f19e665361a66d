-- harel_throughput_by_queue: harel_throughput split by queue, for a chart with a series per
-- queue. An operator's entry point (the dashboard).
--
-- Takes:
--   p_minutes  the last this many minutes, 1 to 1,440
--   p_top      how many queues get a series of their own, 1 to 100: the busiest over the
--              period (succeeded + failed + dead, then by name); the others are folded
--              into one series
-- Returns one row per series and minute, series by series (the busiest first, the folded
--   ones last), each series' minutes oldest first, zeros included; no row when no pool
--   reported anything over the period:
--   minute, queue (NULL: the folded queues together; '': counted not by queue, by a pool
--   of the release before migration 0019), succeeded, failed, dead,
--   folded (how many queues the NULL series holds, on every row)
--   Each minute's rows add up to harel_throughput's row of that minute.
-- Fence: sums saturate at the largest BIGINT; at most 101 series of 1,440 minutes. STABLE.
-- Locks: none.
-- Indexes: throughput's key (minute, worker, queue).
-- Errors: 22023 for p_minutes or p_top out of range.
CREATE OR REPLACE FUNCTION @schema@.harel_throughput_by_queue(p_minutes INT, p_top INT)
RETURNS TABLE (
    minute    TIMESTAMPTZ,
    queue     TEXT,
    succeeded BIGINT,
    failed    BIGINT,
    dead      BIGINT,
    folded    INT
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
    v_last  TIMESTAMPTZ := date_trunc('minute', statement_timestamp());
    v_first TIMESTAMPTZ;
BEGIN
    IF p_minutes NOT BETWEEN 1 AND 1440 OR p_top NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'harel_throughput_by_queue: p_minutes is 1 to 1440, p_top 1 to 100'
            USING ERRCODE = '22023';
    END IF;
    v_first := v_last - (p_minutes - 1) * interval '1 minute';
    RETURN QUERY
    WITH ranked AS (
        SELECT t.queue AS name,
               row_number() OVER (ORDER BY sum(t.succeeded::numeric + t.failed + t.dead) DESC,
                                           t.queue) AS rank
          FROM @schema@.throughput t
         WHERE t.minute BETWEEN v_first AND v_last
         GROUP BY t.queue
    ), fold AS (
        SELECT count(*) FILTER (WHERE r.rank > p_top)::int AS n FROM ranked r
    ), series AS (
        SELECT r.name, r.rank FROM ranked r WHERE r.rank <= p_top
        UNION ALL
        SELECT NULL, p_top + 1 FROM fold WHERE fold.n > 0
    ), sums AS (
        SELECT t.minute AS at, CASE WHEN r.rank <= p_top THEN r.name END AS name,
               sum(t.succeeded) AS s, sum(t.failed) AS f, sum(t.dead) AS d
          FROM @schema@.throughput t
          JOIN ranked r ON r.name = t.queue
         WHERE t.minute BETWEEN v_first AND v_last
         GROUP BY 1, 2
    )
    SELECT m.at,
           se.name,
           LEAST(COALESCE(x.s, 0), 9223372036854775807)::bigint,
           LEAST(COALESCE(x.f, 0), 9223372036854775807)::bigint,
           LEAST(COALESCE(x.d, 0), 9223372036854775807)::bigint,
           fold.n
      FROM series se
     CROSS JOIN fold
     CROSS JOIN generate_series(v_first, v_last, interval '1 minute') AS m(at)
      LEFT JOIN sums x ON x.at = m.at AND x.name IS NOT DISTINCT FROM se.name
     ORDER BY se.rank, m.at;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_throughput_by_queue(INT, INT) FROM PUBLIC;
