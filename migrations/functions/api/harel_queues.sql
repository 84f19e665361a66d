-- harel_queues: every queue with its settings and how many of its groups are ready and
-- running. An operator's entry point (the CLI, the dashboard), and what the worker that
-- samples the depth gauges reads. One snapshot.
--
-- Takes: nothing.
-- Returns one row per queue, by id:
--   name, paused_at, concurrency_limit, rate_limit, rate_period_ms
--   ready            groups whose next job may start now
--   running          live leases among the first 1,000 groups per level that are leased,
--                    parked or scheduled, soonest first (leases end within their duration,
--                    so they come before jobs scheduled later)
--   counts_exact     false when a scan stopped at its cap: the counts are then lower bounds
--   oldest_ready_at  since when the queue's longest-waiting ready group has been claimable
--                    (NULL: none is), among the due timed groups and the 1,000 ready
--                    groups next to start per level (fair share may keep a light key's
--                    group waiting longer, further on)
-- Fence: bounded: every figure is a capped range scan of a claim index, so a queue of a
--   million groups costs no more than a small one: `ready` reads at most 10,000 entries
--   per queue and level, `running` at most 1,000 (each with a heap read for its lease
--   token, hence the smaller cap). STABLE.
-- Locks: none.
-- Indexes: transport_groups_timed and transport_groups_ready, range scans in index order;
--   queues' key.
-- Errors: none of its own.
CREATE OR REPLACE FUNCTION "harel".harel_queues()
RETURNS TABLE (
    name              TEXT,
    paused_at         TIMESTAMPTZ,
    concurrency_limit INT,
    rate_limit        INT,
    rate_period_ms    BIGINT,
    ready             BIGINT,
    running           BIGINT,
    counts_exact      BOOLEAN,
    oldest_ready_at   TIMESTAMPTZ
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
    c_cap        CONSTANT INT := 10000;
    c_future_cap CONSTANT INT := 1000;
    -- the ready groups next to start whose oldest is reported (see the header)
    c_oldest_window CONSTANT INT := 1000;
BEGIN
    RETURN QUERY
    SELECT q.name, q.paused_at, q.concurrency_limit, q.rate_limit, q.rate_period_ms,
           sum(c.ready)::bigint, sum(c.running)::bigint,
           bool_and(c.ready_seen < c_cap AND c.future_seen < c_future_cap),
           min(c.oldest)
      FROM "harel".queues q
     CROSS JOIN generate_series(0, 4) AS l(level)
     CROSS JOIN LATERAL (
            SELECT r.n AS ready, r.n AS ready_seen, f.running, f.seen AS future_seen,
                   LEAST((SELECT g.available_at FROM "harel".transport_groups g
                           WHERE g.queue_id = q.id AND g.priority = l.level
                             AND g.fair_tag IS NULL
                             AND g.available_at <= statement_timestamp()
                           ORDER BY g.available_at
                           LIMIT 1),
                         (SELECT min(x.available_at)
                            FROM (SELECT g.available_at FROM "harel".transport_groups g
                                   WHERE g.queue_id = q.id AND g.priority = l.level
                                     AND g.fair_tag IS NOT NULL
                                   ORDER BY g.fair_tag
                                   LIMIT c_oldest_window) AS x)) AS oldest
              -- the ready domain and the due timed groups, each in its claim index's order:
              -- range scans, never a walk of the table for a level with fewer than c_cap
              FROM (SELECT (SELECT count(*)
                              FROM (SELECT 1 FROM "harel".transport_groups g
                                     WHERE g.queue_id = q.id AND g.priority = l.level
                                       AND g.fair_tag IS NOT NULL
                                     ORDER BY g.fair_tag
                                     LIMIT c_cap) AS x)
                           + (SELECT count(*)
                                FROM (SELECT 1 FROM "harel".transport_groups g
                                       WHERE g.queue_id = q.id AND g.priority = l.level
                                         AND g.fair_tag IS NULL
                                         AND g.available_at <= statement_timestamp()
                                       ORDER BY g.available_at
                                       LIMIT c_cap) AS x) AS n) AS r,
                   (SELECT count(*) FILTER (WHERE y.locked_by IS NOT NULL) AS running,
                           count(*) AS seen
                      FROM (SELECT g.locked_by FROM "harel".transport_groups g
                             WHERE g.queue_id = q.id AND g.priority = l.level
                               AND g.fair_tag IS NULL
                               AND g.available_at > statement_timestamp()
                             ORDER BY g.available_at
                             LIMIT c_future_cap) AS y) AS f) AS c
     GROUP BY q.id, q.name, q.paused_at, q.concurrency_limit, q.rate_limit, q.rate_period_ms
     ORDER BY q.id;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_queues() FROM PUBLIC;
