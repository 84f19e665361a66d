-- harel_workers: the worker pools seen lately, oldest first: where each runs, what it
-- serves, and its counters. An operator's entry point (the CLI, the dashboard).
--
-- Takes:
--   p_within_ms     pools seen within this long, 1 ms to 1 day (a pool is seen at each
--                   report, about every 10 seconds)
--   p_limit         at most this many pools, 1 to 1,000
--   p_queues_shown  at most this many of each pool's queue names, 0 to 1,000
-- Returns one row per pool, by start time:
--   id, host, pid, concurrency, running, succeeded, failed, dead, started_at, seen_at
--   queues       its first p_queues_shown queue names; queue_count: how many it serves
--   stopped_at   set by a graceful stop
--   total        the pools seen within the period, counted up to 10,001, so a page says
--                how many it did not show
-- Fence: bounded by its limits and by harel_maintain (it keeps the 10,000 pools seen
--   last). STABLE.
-- Locks: none.
-- Indexes: workers_seen_at.
-- Errors: 22023 for arguments out of range.
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
