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
--   p_stopping     a graceful stop: stopped_at is set, and the row is final from then on
--   p_counted_queues, p_counted_succeeded, p_counted_failed, p_counted_dead
--                  its totals since it started by queue (migration 0019): aligned arrays of
--                  at most 1,000 distinct queue names and counts of 0 or more; all NULL
--                  (the default, and the previous release's call) when it does not say
-- Returns: nothing.
-- Fence: everything it writes is bounded, as operators' pages read it: the checks above;
--   sums saturate at the largest BIGINT instead of failing. The number of pools is bounded
--   by harel_maintain (the 10,000 seen last), every listing by its limit.
-- Locks: the pool's row of `workers` FOR UPDATE and its rows of `throughput` (only another
--   report of the same pool waits for them).
-- Indexes: the keys of workers and throughput (minute, worker, queue).
-- Errors: 22023 for a report outside those bounds.
--
-- Steps:
--   1. Check the report.
--   2. Read the pool's last totals (locking its row) and upsert its row.
--   3. Add the totals' increase since its last report to its rows of the current minute
--      (database clock) in `throughput`, one per queue: each queue's increase since its
--      last totals by queue, and what the total's increase has beyond their sum under ''
--      (not by queue). Without totals by queue, the whole increase counts under the pool's
--      queue if it serves one, else under ''. A pool whose row was pruned starts over from
--      its totals, counted in the minute it reports them.
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
    p_stopping    BOOLEAN,
    p_counted_queues    TEXT[]   DEFAULT NULL,
    p_counted_succeeded BIGINT[] DEFAULT NULL,
    p_counted_failed    BIGINT[] DEFAULT NULL,
    p_counted_dead      BIGINT[] DEFAULT NULL
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
    v_queues    TEXT[];
    v_q_succeeded BIGINT[];
    v_q_failed  BIGINT[];
    v_q_dead    BIGINT[];
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
    IF num_nonnulls(p_counted_queues, p_counted_succeeded, p_counted_failed, p_counted_dead)
       NOT IN (0, 4)
       OR (p_counted_queues IS NOT NULL
           AND (cardinality(p_counted_queues) > 1000
                OR cardinality(p_counted_succeeded) <> cardinality(p_counted_queues)
                OR cardinality(p_counted_failed) <> cardinality(p_counted_queues)
                OR cardinality(p_counted_dead) <> cardinality(p_counted_queues)
                OR array_ndims(p_counted_queues) > 1 OR array_ndims(p_counted_succeeded) > 1
                OR array_ndims(p_counted_failed) > 1 OR array_ndims(p_counted_dead) > 1
                OR EXISTS (SELECT 1
                             FROM unnest(p_counted_queues, p_counted_succeeded,
                                         p_counted_failed, p_counted_dead) AS x(name, s, f, d)
                            WHERE x.name IS NULL OR x.name !~ '^[A-Za-z0-9_.:-]{1,64}$'
                               OR x.s IS NULL OR x.f IS NULL OR x.d IS NULL
                               OR x.s < 0 OR x.f < 0 OR x.d < 0)
                OR (SELECT count(DISTINCT x.name) FROM unnest(p_counted_queues) AS x(name))
                   <> cardinality(p_counted_queues))) THEN
        RAISE EXCEPTION 'harel_worker_report: the totals by queue are four aligned arrays (or none) of at most 1000 distinct queue names and counts of 0 or more'
            USING ERRCODE = '22023';
    END IF;

    SELECT w.succeeded, w.failed, w.dead, w.counted_queues, w.counted_succeeded,
           w.counted_failed, w.counted_dead
      INTO v_succeeded, v_failed, v_dead, v_queues, v_q_succeeded, v_q_failed, v_q_dead
      FROM "harel".workers w
     WHERE w.id = p_worker
       FOR UPDATE;
    INSERT INTO "harel".workers AS w
           (id, host, pid, queues, concurrency, running, succeeded, failed, dead, started_at,
            seen_at, stopped_at, counted_queues, counted_succeeded, counted_failed,
            counted_dead)
    VALUES (p_worker, p_host, p_pid, p_queues, p_concurrency, p_running, p_succeeded,
            p_failed, p_dead, v_now, v_now, CASE WHEN p_stopping THEN v_now END,
            p_counted_queues, p_counted_succeeded, p_counted_failed, p_counted_dead)
    ON CONFLICT (id) DO UPDATE
       SET queues = excluded.queues, concurrency = excluded.concurrency,
           running = excluded.running, succeeded = excluded.succeeded,
           failed = excluded.failed, dead = excluded.dead, seen_at = excluded.seen_at,
           stopped_at = excluded.stopped_at, counted_queues = excluded.counted_queues,
           counted_succeeded = excluded.counted_succeeded,
           counted_failed = excluded.counted_failed, counted_dead = excluded.counted_dead
     -- a stopped pool's row is final: a periodic report its shutdown interrupted, whose
     -- statement still ran, must not make it look running again (a pool's id is its run's)
     WHERE w.stopped_at IS NULL;

    -- (both counts are 0 or more, so the difference cannot overflow)
    v_succeeded := GREATEST(p_succeeded - COALESCE(v_succeeded, 0), 0);
    v_failed := GREATEST(p_failed - COALESCE(v_failed, 0), 0);
    v_dead := GREATEST(p_dead - COALESCE(v_dead, 0), 0);
    -- each queue's increase since its last totals (a queue new to the report from 0), and
    -- the rest of the total's increase under '' (not by queue; never below 0), or, without
    -- totals by queue, the whole increase under the pool's only queue or ''
    INSERT INTO "harel".throughput AS t (minute, worker, queue, succeeded, failed, dead)
    SELECT date_trunc('minute', v_now), p_worker, inc.queue, inc.s, inc.f, inc.d
      FROM (
            SELECT x.name AS queue,
                   GREATEST(x.s - COALESCE(o.s, 0), 0) AS s,
                   GREATEST(x.f - COALESCE(o.f, 0), 0) AS f,
                   GREATEST(x.d - COALESCE(o.d, 0), 0) AS d
              FROM unnest(p_counted_queues, p_counted_succeeded, p_counted_failed,
                          p_counted_dead) AS x(name, s, f, d)
              LEFT JOIN unnest(v_queues, v_q_succeeded, v_q_failed, v_q_dead)
                        AS o(name, s, f, d) ON o.name = x.name
           ) AS inc
     WHERE p_counted_queues IS NOT NULL AND (inc.s > 0 OR inc.f > 0 OR inc.d > 0)
    -- (the cap written out, not c_max: Citus runs an INSERT … SELECT of no table through
    -- the coordinator and sends the worker node its DO UPDATE SET with the variable left
    -- as a parameter it gives no type: "could not determine data type of parameter $1")
    ON CONFLICT (minute, worker, queue) DO UPDATE
       SET succeeded = LEAST(t.succeeded::numeric + excluded.succeeded,
                             9223372036854775807::numeric)::bigint,
           failed = LEAST(t.failed::numeric + excluded.failed,
                          9223372036854775807::numeric)::bigint,
           dead = LEAST(t.dead::numeric + excluded.dead, 9223372036854775807::numeric)::bigint;
    IF p_counted_queues IS NOT NULL THEN
        -- (what the queues above took of the total's increase)
        -- (from 0 to the total's increase: a BIGINT)
        SELECT GREATEST(v_succeeded - COALESCE(sum(GREATEST(x.s - COALESCE(o.s, 0), 0)), 0),
                        0)::bigint,
               GREATEST(v_failed - COALESCE(sum(GREATEST(x.f - COALESCE(o.f, 0), 0)), 0),
                        0)::bigint,
               GREATEST(v_dead - COALESCE(sum(GREATEST(x.d - COALESCE(o.d, 0), 0)), 0),
                        0)::bigint
          INTO v_succeeded, v_failed, v_dead
          FROM unnest(p_counted_queues, p_counted_succeeded, p_counted_failed,
                      p_counted_dead) AS x(name, s, f, d)
          LEFT JOIN unnest(v_queues, v_q_succeeded, v_q_failed, v_q_dead)
                    AS o(name, s, f, d) ON o.name = x.name;
    END IF;
    IF v_succeeded > 0 OR v_failed > 0 OR v_dead > 0 THEN
        INSERT INTO "harel".throughput AS t (minute, worker, queue, succeeded, failed, dead)
        VALUES (date_trunc('minute', v_now), p_worker,
                CASE WHEN p_counted_queues IS NULL AND cardinality(p_queues) = 1
                     THEN p_queues[1] ELSE '' END,
                v_succeeded, v_failed, v_dead)
        ON CONFLICT (minute, worker, queue) DO UPDATE
           SET succeeded = LEAST(t.succeeded::numeric + excluded.succeeded, c_max)::bigint,
               failed = LEAST(t.failed::numeric + excluded.failed, c_max)::bigint,
               dead = LEAST(t.dead::numeric + excluded.dead, c_max)::bigint;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_worker_report(
    UUID, TEXT, INT, TEXT[], INT, INT, BIGINT, BIGINT, BIGINT, BOOLEAN, TEXT[], BIGINT[],
    BIGINT[], BIGINT[]) FROM PUBLIC;
