-- harel_worker_report: a running worker pool reports itself. A worker's entry point: about
-- every 10 seconds, and once more when it stops.
--
-- Takes:
--   p_worker       the pool's id
--   p_host, p_pid  where it runs (a host of 1 to 255 bytes)
--   p_queues       the queues it serves: at most 1,000 distinct queue names
--                  (harel_ensure_queue's rule)
--   p_concurrency, p_running  its concurrency and running jobs, 0 to 10,000,000
--   p_succeeded, p_failed, p_dead  its totals since it started (jobs succeeded; attempts
--                  failed, retried or not; jobs dead-lettered), 0 or more
--   p_stopping     a graceful stop: stopped_at is set
-- Returns: nothing.
-- Fence: everything it writes is bounded, as operators' pages read it: the checks above;
--   sums saturate at the largest BIGINT instead of failing. The number of pools is bounded
--   by harel_maintain (the 10,000 seen last), every listing by its limit.
-- Locks: the pool's row of `workers` FOR UPDATE and its row of `throughput` (only another
--   report of the same pool waits for them).
-- Indexes: the keys of workers and throughput (minute, worker).
-- Errors: 22023 for a report outside those bounds.
--
-- Steps:
--   1. Check the report.
--   2. Read the pool's last totals (locking its row) and upsert its row.
--   3. Add the totals' increase since its last report to its row of the current minute
--      (database clock) in `throughput`. A pool whose row was pruned starts over from its
--      totals, counted in the minute it reports them.
CREATE OR REPLACE FUNCTION "harel".harel_worker_report(
    p_worker      UUID,
    p_host        TEXT,
    p_pid         INT,
    p_queues      TEXT[],
    p_concurrency INT,
    p_running     INT,
    p_succeeded   BIGINT,
    p_failed      BIGINT,
    p_dead        BIGINT,
    p_stopping    BOOLEAN
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now       TIMESTAMPTZ := statement_timestamp();
    v_succeeded BIGINT;
    v_failed    BIGINT;
    v_dead      BIGINT;
    c_max       CONSTANT NUMERIC := 9223372036854775807::numeric;
BEGIN
    IF p_worker IS NULL OR octet_length(p_host) NOT BETWEEN 1 AND 255 OR p_pid IS NULL
       OR p_queues IS NULL OR cardinality(p_queues) > 1000
       OR p_concurrency NOT BETWEEN 0 AND 10000000 OR p_running NOT BETWEEN 0 AND 10000000
       OR p_succeeded IS NULL OR p_failed IS NULL OR p_dead IS NULL
       OR p_succeeded < 0 OR p_failed < 0 OR p_dead < 0 OR p_stopping IS NULL THEN
        RAISE EXCEPTION 'harel_worker_report: need a worker id, a host of 1 to 255 bytes, a pid, at most 1000 queues and counts of 0 or more'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_queues) AS x(name)
                WHERE x.name IS NULL OR x.name !~ '^[A-Za-z0-9_.:-]{1,64}$')
       OR (SELECT count(DISTINCT x.name) FROM unnest(p_queues) AS x(name))
          <> cardinality(p_queues) THEN
        RAISE EXCEPTION 'harel_worker_report: each queue is a distinct queue name (1 to 64 letters, digits, _ - . or :)'
            USING ERRCODE = '22023';
    END IF;

    SELECT w.succeeded, w.failed, w.dead INTO v_succeeded, v_failed, v_dead
      FROM "harel".workers w
     WHERE w.id = p_worker
       FOR UPDATE;
    INSERT INTO "harel".workers AS w
           (id, host, pid, queues, concurrency, running, succeeded, failed, dead, started_at,
            seen_at, stopped_at)
    VALUES (p_worker, p_host, p_pid, p_queues, p_concurrency, p_running, p_succeeded,
            p_failed, p_dead, v_now, v_now, CASE WHEN p_stopping THEN v_now END)
    ON CONFLICT (id) DO UPDATE
       SET queues = excluded.queues, concurrency = excluded.concurrency,
           running = excluded.running, succeeded = excluded.succeeded,
           failed = excluded.failed, dead = excluded.dead, seen_at = excluded.seen_at,
           stopped_at = excluded.stopped_at;

    -- (both counts are 0 or more, so the difference cannot overflow)
    v_succeeded := GREATEST(p_succeeded - COALESCE(v_succeeded, 0), 0);
    v_failed := GREATEST(p_failed - COALESCE(v_failed, 0), 0);
    v_dead := GREATEST(p_dead - COALESCE(v_dead, 0), 0);
    IF v_succeeded > 0 OR v_failed > 0 OR v_dead > 0 THEN
        INSERT INTO "harel".throughput AS t (minute, worker, succeeded, failed, dead)
        VALUES (date_trunc('minute', v_now), p_worker, v_succeeded, v_failed, v_dead)
        ON CONFLICT (minute, worker) DO UPDATE
           SET succeeded = LEAST(t.succeeded::numeric + excluded.succeeded, c_max)::bigint,
               failed = LEAST(t.failed::numeric + excluded.failed, c_max)::bigint,
               dead = LEAST(t.dead::numeric + excluded.dead, c_max)::bigint;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_worker_report(
    UUID, TEXT, INT, TEXT[], INT, INT, BIGINT, BIGINT, BIGINT, BOOLEAN) FROM PUBLIC;
