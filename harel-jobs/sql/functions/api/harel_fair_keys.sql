-- harel_fair_keys: a page of a queue's fairness keys in key order: the keys that have ready
-- groups and the keys with a weight set, each with its weight, ready groups and running
-- jobs, and the queue's limit per key. An operator's entry point (the CLI, the dashboard).
--
-- Takes:
--   p_queue  the queue's name
--   p_after  the cursor: keys after this one (NULL: from the first, '' included)
--   p_limit  1 to 1,000
-- Returns at most p_limit rows in key order, then ONE cursor row (key NULL) whose
--   `weight` is NULL, whose `more` says whether keys follow the page's last and whose
--   `key_limit` is the queue's limit per key:
--   key           the fairness key ('' for jobs without one)
--   weight        its weight (1 unless set)
--   ready         its ready groups (the ready domain, every level, parked ones included),
--                 counted up to 10,000
--   ready_exact   false when the count stopped at its cap
--   running       its live leases: exact in a key-limited queue; otherwise counted among
--                 the queue's first 10,000 leased or waiting groups per level by lease end
--   running_exact false when that scan stopped at its cap
--   more          (the cursor row) whether another page follows
--   key_limit     (the cursor row) the queue's key_concurrency_limit
--   key_rate_limit, key_rate_period_ms  (the cursor row) the queue's rate per key
-- Fence: bounded whatever the number of keys: per level, a loose scan of
--   transport_groups_ready_by_key that steps from one key to the next (p_limit + 1 steps
--   at most), and a range of fair_keys; per key shown, a capped count per level. Groups
--   that are leased or delayed are not in the ready domain: a key with only those (and no
--   weight) is not listed. The running counts: per key shown, a range of
--   transport_groups_limited_by_key in a key-limited queue (at most the limit, plus the
--   leases that lapsed), else one capped range of transport_groups_timed per level. STABLE.
-- Locks: none.
-- Indexes: transport_groups_ready_by_key (queue_id, priority, fair_key, fair_tag);
--   transport_groups_limited_by_key or transport_groups_timed;
--   fair_keys' key; queues' unique name.
-- Errors: 22023 for a limit out of range.
CREATE OR REPLACE FUNCTION @schema@.harel_fair_keys(
    p_queue TEXT,
    p_after TEXT,
    p_limit INT
) RETURNS TABLE (
    key         TEXT,
    weight      INT,
    ready       BIGINT,
    ready_exact BOOLEAN,
    running     BIGINT,
    running_exact BOOLEAN,
    more        BOOLEAN,
    key_limit   INT,
    key_rate_limit INT,
    key_rate_period_ms BIGINT
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
    c_cap   CONSTANT INT := 10000;
    v_queue SMALLINT;
    v_keys  TEXT[];
    v_key_limit INT;
    v_key_rate  INT;
    v_key_period BIGINT;
    v_now   TIMESTAMPTZ := statement_timestamp();
    v_run_keys  TEXT[];
    v_run_n     BIGINT[];
    v_run_exact BOOLEAN := true;
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_fair_keys: need a limit of 1 to 1000' USING ERRCODE = '22023';
    END IF;
    SELECT q.id, q.key_concurrency_limit, q.key_rate_limit, q.key_rate_period_ms
      INTO v_queue, v_key_limit, v_key_rate, v_key_period
      FROM @schema@.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::text, NULL::int, NULL::bigint, NULL::boolean, NULL::bigint,
                            NULL::boolean, false, NULL::int, NULL::int, NULL::bigint;
        RETURN;
    END IF;

    -- the first p_limit + 1 keys after the cursor, from every level's ready domain (a loose
    -- index scan: one probe per key) and from the weights
    WITH RECURSIVE walk AS (
        SELECT l.level, 1 AS n,
               (SELECT g.fair_key FROM @schema@.transport_groups g
                 WHERE g.queue_id = v_queue AND g.priority = l.level
                   AND g.fair_tag IS NOT NULL AND g.fair_key >= COALESCE(p_after, '')
                   AND g.fair_key IS DISTINCT FROM p_after
                 ORDER BY g.fair_key LIMIT 1) AS key
          FROM generate_series(0, 4) AS l(level)
        UNION ALL
        SELECT w.level, w.n + 1,
               (SELECT g.fair_key FROM @schema@.transport_groups g
                 WHERE g.queue_id = v_queue AND g.priority = w.level
                   AND g.fair_tag IS NOT NULL AND g.fair_key > w.key
                 ORDER BY g.fair_key LIMIT 1)
          FROM walk w
         WHERE w.key IS NOT NULL AND w.n <= p_limit
    )
    SELECT array_agg(k.key ORDER BY k.key)
      INTO v_keys
      FROM (SELECT DISTINCT u.key
              FROM (SELECT w.key FROM walk w WHERE w.key IS NOT NULL
                    UNION ALL
                    (SELECT f.key FROM @schema@.fair_keys f
                      WHERE f.queue_id = v_queue AND f.key >= COALESCE(p_after, '')
                        AND f.key IS DISTINCT FROM p_after
                      ORDER BY f.key LIMIT p_limit + 1)) AS u
             ORDER BY u.key
             LIMIT p_limit + 1) AS k;

    -- running jobs of a queue whose leases are not indexed by key: its first c_cap leased
    -- or waiting groups per level, by lease end, once for the page
    IF v_key_limit IS NULL THEN
        WITH scanned AS MATERIALIZED (
            SELECT l.level, y.fair_key, y.locked_by
              FROM generate_series(0, 4) AS l(level)
             CROSS JOIN LATERAL (
                    SELECT g.fair_key, g.locked_by
                      FROM @schema@.transport_groups g
                     WHERE g.queue_id = v_queue AND g.priority = l.level
                       AND g.fair_tag IS NULL AND g.available_at > v_now
                     ORDER BY g.available_at
                     LIMIT c_cap) AS y
        )
        SELECT r.keys, r.ns,
               NOT EXISTS (SELECT 1 FROM scanned s GROUP BY s.level HAVING count(*) >= c_cap)
          INTO v_run_keys, v_run_n, v_run_exact
          FROM (SELECT array_agg(x.fair_key) AS keys, array_agg(x.n) AS ns
                  FROM (SELECT s.fair_key, count(*) AS n FROM scanned s
                         WHERE s.locked_by IS NOT NULL GROUP BY s.fair_key) AS x) AS r;
    END IF;

    RETURN QUERY
    SELECT k.key,
           COALESCE((SELECT f.weight FROM @schema@.fair_keys f
                      WHERE f.queue_id = v_queue AND f.key = k.key), 1),
           c.n, c.exact,
           CASE WHEN v_key_limit IS NULL
                THEN COALESCE(r.n, 0)
                ELSE (SELECT count(*) FROM @schema@.transport_groups l
                       WHERE l.limited_queue = v_queue AND l.fair_key = k.key
                         AND l.available_at > v_now AND l.locked_by IS NOT NULL) END,
           v_key_limit IS NOT NULL OR v_run_exact,
           NULL::boolean, NULL::int, NULL::int, NULL::bigint
      FROM unnest(v_keys[1:p_limit]) WITH ORDINALITY AS k(key, ord)
      LEFT JOIN unnest(v_run_keys, v_run_n) AS r(key, n) ON r.key = k.key
     CROSS JOIN LATERAL (
            SELECT sum(x.n)::bigint AS n, bool_and(x.n < c_cap) AS exact
              FROM generate_series(0, 4) AS l(level)
             CROSS JOIN LATERAL (
                    SELECT count(*) AS n
                      FROM (SELECT 1 FROM @schema@.transport_groups g
                             WHERE g.queue_id = v_queue AND g.priority = l.level
                               AND g.fair_key = k.key AND g.fair_tag IS NOT NULL
                             ORDER BY g.fair_tag
                             LIMIT c_cap) AS y) AS x) AS c
     ORDER BY k.ord;
    RETURN QUERY SELECT NULL::text, NULL::int, NULL::bigint, NULL::boolean, NULL::bigint,
                        NULL::boolean, COALESCE(cardinality(v_keys), 0) > p_limit,
                        v_key_limit, v_key_rate, v_key_period;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_fair_keys(TEXT, TEXT, INT) FROM PUBLIC;
