-- harel_workers: the worker pools seen within p_within_ms (migration 0008), oldest first:
-- where each runs, what it serves, and its counters. What an operator (the CLI, the
-- dashboard) lists. A pool is seen at each report (about every 10 seconds); `stopped_at` is
-- set by a graceful shutdown.
--
-- Bounded (migration 0011): at most p_limit pools (1 to 1,000), each with at most
-- p_queues_shown of its queue names (0 to 1,000; `queue_count` says how many it serves),
-- and each row carries `total`, the number of pools seen within the period, counted up to
-- 10,001 (harel_maintain keeps the 10,000 seen last), so a page says how many it did not
-- show.
CREATE OR REPLACE FUNCTION "harel".harel_workers(
    p_within_ms      BIGINT,
    p_limit          INT DEFAULT 1000,
    p_queues_shown   INT DEFAULT 1000
) RETURNS TABLE (
    id          UUID,
    host        TEXT,
    pid         INT,
    queues      TEXT[],
    queue_count INT,
    concurrency INT,
    running     INT,
    succeeded   BIGINT,
    failed      BIGINT,
    dead        BIGINT,
    started_at  TIMESTAMPTZ,
    seen_at     TIMESTAMPTZ,
    stopped_at  TIMESTAMPTZ,
    total       BIGINT
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
    v_since TIMESTAMPTZ := statement_timestamp() - p_within_ms * interval '1 millisecond';
    v_total BIGINT;
BEGIN
    IF p_within_ms NOT BETWEEN 1 AND 86400000 OR p_limit NOT BETWEEN 1 AND 1000
       OR p_queues_shown NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'harel_workers: p_within_ms is 1 ms to 1 day, p_limit 1 to 1000, p_queues_shown 0 to 1000'
            USING ERRCODE = '22023';
    END IF;
    SELECT count(*) INTO v_total
      FROM (SELECT 1 FROM "harel".workers w WHERE w.seen_at > v_since LIMIT 10001) AS c;
    RETURN QUERY
    SELECT w.id, w.host, w.pid, w.queues[1:p_queues_shown], cardinality(w.queues),
           w.concurrency, w.running, w.succeeded, w.failed, w.dead, w.started_at, w.seen_at,
           w.stopped_at, v_total
      FROM "harel".workers w
     WHERE w.seen_at > v_since
     ORDER BY w.started_at, w.id
     LIMIT p_limit;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_workers(BIGINT, INT, INT) FROM PUBLIC;
