-- harel_depth: the queue's depth by named queue, priority level and state, in groups (each
-- counted by its first job: the one that runs next). An operator's entry point (the
-- dashboard's overview, the CLI). One snapshot.
--
-- Takes: nothing.
-- Returns one row per queue and level that has any group, by queue id then level from 4
--   down:
--   queue, priority
--   ready            groups whose next job may start now (a lapsed lease included): the
--                    ready domain and the due timed groups not promoted into it yet
--   running          live leases
--   retrying         groups parked for a failed attempt's backoff
--   scheduled        groups whose head is delayed or snoozed
--   counts_exact     false when a scan stopped at its cap: the counts are then lower bounds
--   oldest_ready_at  since when the level's longest-waiting ready group has been claimable:
--                    among the due timed groups and the 1,000 ready groups next to start
--                    (fair share may keep a light key's group waiting longer, further on)
-- Fence: bounded, as harel_queues: `ready` reads at most 10,000 entries of each claim
--   index per queue and level; `running`, `retrying` and `scheduled` share one scan of at most 1,000,
--   soonest first, each entry with a heap read for its lease and attempts. STABLE.
-- Locks: none.
-- Indexes: transport_groups_timed and transport_groups_ready, range scans in index order;
--   queues' key.
-- Errors: none of its own.
CREATE OR REPLACE FUNCTION @schema@.harel_depth()
RETURNS TABLE (
    queue           TEXT,
    priority        SMALLINT,
    ready           BIGINT,
    running         BIGINT,
    retrying        BIGINT,
    scheduled       BIGINT,
    counts_exact    BOOLEAN,
    oldest_ready_at TIMESTAMPTZ
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
    SELECT q.name, l.level::smallint, r.n, f.running, f.retrying, f.scheduled,
           r.n < c_cap AND f.seen < c_future_cap, o.oldest
      FROM @schema@.queues q
     CROSS JOIN generate_series(0, 4) AS l(level)
     CROSS JOIN LATERAL (
            -- the ready domain (tagged) and the timed groups that are due (not promoted yet),
            -- each in its index's order: range scans, never a walk of the table
            SELECT (SELECT count(*)
                      FROM (SELECT 1 FROM @schema@.transport_groups g
                             WHERE g.queue_id = q.id AND g.priority = l.level
                               AND g.fair_tag IS NOT NULL
                             ORDER BY g.fair_tag
                             LIMIT c_cap) AS x)
                   + (SELECT count(*)
                        FROM (SELECT 1 FROM @schema@.transport_groups g
                               WHERE g.queue_id = q.id AND g.priority = l.level
                                 AND g.fair_tag IS NULL
                                 AND g.available_at <= statement_timestamp()
                               ORDER BY g.available_at
                               LIMIT c_cap) AS x) AS n) AS r
     CROSS JOIN LATERAL (
            SELECT count(*) FILTER (WHERE y.locked_by IS NOT NULL) AS running,
                   count(*) FILTER (WHERE y.locked_by IS NULL AND y.head_attempts > 0)
                       AS retrying,
                   count(*) FILTER (WHERE y.locked_by IS NULL AND y.head_attempts = 0)
                       AS scheduled,
                   count(*) AS seen
              FROM (SELECT g.locked_by, g.head_attempts FROM @schema@.transport_groups g
                     WHERE g.queue_id = q.id AND g.priority = l.level
                       AND g.fair_tag IS NULL
                       AND g.available_at > statement_timestamp()
                     ORDER BY g.available_at
                     LIMIT c_future_cap) AS y) AS f
     CROSS JOIN LATERAL (
            SELECT LEAST((SELECT g.available_at FROM @schema@.transport_groups g
                           WHERE g.queue_id = q.id AND g.priority = l.level
                             AND g.fair_tag IS NULL
                             AND g.available_at <= statement_timestamp()
                           ORDER BY g.available_at
                           LIMIT 1),
                         (SELECT min(x.available_at)
                            FROM (SELECT g.available_at FROM @schema@.transport_groups g
                                   WHERE g.queue_id = q.id AND g.priority = l.level
                                     AND g.fair_tag IS NOT NULL
                                   ORDER BY g.fair_tag
                                   LIMIT c_oldest_window) AS x)) AS oldest) AS o
     WHERE r.n > 0 OR f.seen > 0
     ORDER BY q.id, l.level DESC;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_depth() FROM PUBLIC;
