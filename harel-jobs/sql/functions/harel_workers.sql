-- harel_workers: the worker pools seen within p_within_ms (migration 0008), oldest first,
-- at most 1,000: where each runs, what it serves, and its counters. What an operator (the
-- CLI, the dashboard) lists. A pool is seen at each report (about every 10 seconds);
-- `stopped_at` is set by a graceful shutdown.
CREATE OR REPLACE FUNCTION @schema@.harel_workers(p_within_ms BIGINT)
RETURNS TABLE (
    id          UUID,
    host        TEXT,
    pid         INT,
    queues      TEXT[],
    concurrency INT,
    running     INT,
    succeeded   BIGINT,
    failed      BIGINT,
    dead        BIGINT,
    started_at  TIMESTAMPTZ,
    seen_at     TIMESTAMPTZ,
    stopped_at  TIMESTAMPTZ
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
    IF p_within_ms NOT BETWEEN 1 AND 86400000 THEN
        RAISE EXCEPTION 'harel_workers: p_within_ms is 1 ms to 1 day' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.running, w.succeeded, w.failed,
           w.dead, w.started_at, w.seen_at, w.stopped_at
      FROM @schema@.workers w
     WHERE w.seen_at > statement_timestamp() - p_within_ms * interval '1 millisecond'
     ORDER BY w.started_at, w.id
     LIMIT 1000;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_workers(BIGINT) FROM PUBLIC;
