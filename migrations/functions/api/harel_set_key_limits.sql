-- harel_set_key_limits: sets or removes the limits on each fairness key of a named queue
-- (its running jobs, its rate of starts), creating the queue if asked to and nothing was
-- published into it yet. An operator's entry point.
--
-- Takes:
--   p_queue              the queue's name (harel_ensure_queue's rule)
--   p_concurrency_limit  at most this many of one key's jobs of the queue leased at once
--                        over every worker, 1 to 1,000,000 (NULL: none)
--   p_rate_limit         at most this many of one key's starts per p_rate_period_ms, 1 to
--                        1,000,000 per 1 ms to 1 day (both NULL: none)
--   p_create             create the queue if it does not exist (default true); false
--                        refuses an unknown name
-- Returns: nothing.
-- Fence: none beyond the checks. The next claim applies them: a lower running limit lets
--   the running jobs finish and starts no more of a key until it is under the limit; a
--   higher one, or none, gives every parked group back to the ready domain here, in its
--   order. A changed rate starts every key afresh (the queue's key_rates rows deleted);
--   groups deferred under the previous rate keep their start times.
-- Locks: the queue's row (an UPDATE: it waits for a key-limited claim holding it, briefly);
--   the queue's parked groups, FOR NO KEY UPDATE (waits for a claim deciding about one);
--   harel_ensure_queue's when it creates the queue.
-- Indexes: queues' key; transport_groups_ready from the parked band, per level.
-- Errors: 22023 for a limit out of range, or a rate without its period (or the reverse);
--   harel_queue_id's (P0002: an unknown name, not to be created).
--
-- Steps:
--   1. Check the limits; the queue's id (harel_queue_id); update its row; a changed
--      rate: delete the queue's key_rates rows.
--   2. No limit now, or a higher one: the queue's parked groups re-tagged
--      (harel_fair_tags), in their order.
--   3. Wake listening workers when the transaction commits (harel_notify).
CREATE OR REPLACE FUNCTION "harel".harel_set_key_limits(
    p_queue             TEXT,
    p_concurrency_limit INT,
    p_rate_limit        INT DEFAULT NULL,
    p_rate_period_ms    BIGINT DEFAULT NULL,
    p_create            BOOLEAN DEFAULT true
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- the parked band (harel_claim)
    c_parked CONSTANT BIGINT := 4611686018427387904;
    v_queue  SMALLINT;
    v_before INT;
    v_rate   INT;
    v_period BIGINT;
    v_groups TEXT[];
    v_ctids  TID[];
    v_levels SMALLINT[];
    v_keys   TEXT[];
    v_tags   BIGINT[];
BEGIN
    IF p_concurrency_limit NOT BETWEEN 1 AND 1000000 OR p_rate_limit NOT BETWEEN 1 AND 1000000
       OR p_rate_period_ms NOT BETWEEN 1 AND 86400000
       OR (p_rate_limit IS NULL) <> (p_rate_period_ms IS NULL) THEN
        RAISE EXCEPTION 'harel_set_key_limits: a key''s concurrency limit is 1 to 1000000, its rate limit 1 to 1000000 per 1 ms to 1 day'
            USING ERRCODE = '22023';
    END IF;
    v_queue := "harel".harel_queue_id(p_queue, p_create);
    SELECT q.key_concurrency_limit, q.key_rate_limit, q.key_rate_period_ms
      INTO v_before, v_rate, v_period
      FROM "harel".queues q WHERE q.id = v_queue FOR NO KEY UPDATE;
    UPDATE "harel".queues q
       SET key_concurrency_limit = p_concurrency_limit, key_rate_limit = p_rate_limit,
           key_rate_period_ms = p_rate_period_ms
     WHERE q.id = v_queue;
    IF v_rate IS DISTINCT FROM p_rate_limit OR v_period IS DISTINCT FROM p_rate_period_ms THEN
        DELETE FROM "harel".key_rates kr WHERE kr.queue_id = v_queue;
    END IF;

    IF v_before IS NOT NULL
       AND (p_concurrency_limit IS NULL OR p_concurrency_limit > v_before) THEN
        -- lock them (this statement only locks, as harel_claim's first), then read the ones
        -- still parked in a new statement
        SELECT array_agg(p.group_id ORDER BY l.level DESC, p.fair_tag)
          INTO v_groups
          FROM generate_series(0, 4) AS l(level)
         CROSS JOIN LATERAL (
                SELECT g.group_id, g.fair_tag
                  FROM "harel".transport_groups g
                 WHERE g.queue_id = v_queue AND g.priority = l.level
                   AND g.fair_tag >= c_parked
                   FOR NO KEY UPDATE) AS p;
        SELECT array_agg(t.row_ctid ORDER BY t.ord), array_agg(t.priority ORDER BY t.ord),
               array_agg(t.fair_key ORDER BY t.ord)
          INTO v_ctids, v_levels, v_keys
          FROM unnest(v_groups) WITH ORDINALITY AS k(group_id, ord)
         CROSS JOIN LATERAL (SELECT k.ord, g.ctid AS row_ctid, g.priority, g.fair_key
                               FROM "harel".transport_groups g
                              WHERE g.group_id = k.group_id AND g.fair_tag >= c_parked
                             OFFSET 0) AS t;
        IF v_ctids IS NOT NULL THEN
            v_tags := "harel".harel_fair_tags(
                array_fill(v_queue, ARRAY[cardinality(v_ctids)]), v_levels, v_keys);
            UPDATE "harel".transport_groups g
               SET fair_tag = x.tag
              FROM unnest(v_ctids, v_tags) AS x(row_ctid, tag)
             WHERE g.ctid = x.row_ctid;
        END IF;
    END IF;
    PERFORM "harel".harel_notify(NULL);
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_set_key_limits(TEXT, INT, INT, BIGINT, BOOLEAN) FROM PUBLIC;
