-- harel_fair_keys: a page of a queue's fairness keys in key order: the keys that have ready
-- groups and the keys with a weight set, each with its weight and ready groups. An
-- operator's entry point (the CLI, the dashboard).
--
-- Takes:
--   p_queue  the queue's name
--   p_after  the cursor: keys after this one (NULL: from the first, '' included)
--   p_limit  1 to 1,000
-- Returns at most p_limit rows in key order, then ONE cursor row (key NULL) whose
--   `weight` is NULL and whose `more` says whether keys follow the page's last:
--   key           the fairness key ('' for jobs without one)
--   weight        its weight (1 unless set)
--   ready         its ready groups (the ready domain, every level), counted up to 10,000
--   ready_exact   false when the count stopped at its cap
--   more          (the cursor row) whether another page follows
-- Fence: bounded whatever the number of keys: per level, a loose scan of
--   transport_groups_ready_by_key that steps from one key to the next (p_limit + 1 steps
--   at most), and a range of fair_keys; per key shown, a capped count per level. Groups
--   that are leased, parked or delayed are not in the ready domain: they are not counted,
--   and a key with only those (and no weight) is not listed. STABLE.
-- Locks: none.
-- Indexes: transport_groups_ready_by_key (queue_id, priority, fair_key, fair_tag);
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
    more        BOOLEAN
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
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_fair_keys: need a limit of 1 to 1000' USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue FROM @schema@.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::text, NULL::int, NULL::bigint, NULL::boolean, false;
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

    RETURN QUERY
    SELECT k.key,
           COALESCE((SELECT f.weight FROM @schema@.fair_keys f
                      WHERE f.queue_id = v_queue AND f.key = k.key), 1),
           c.n, c.exact, NULL::boolean
      FROM unnest(v_keys[1:p_limit]) WITH ORDINALITY AS k(key, ord)
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
    RETURN QUERY SELECT NULL::text, NULL::int, NULL::bigint, NULL::boolean,
                        COALESCE(cardinality(v_keys), 0) > p_limit;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_fair_keys(TEXT, TEXT, INT) FROM PUBLIC;
