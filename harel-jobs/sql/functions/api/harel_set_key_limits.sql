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
--   higher one, or none, gives the parked groups back to the ready domain in their order:
--   the first 1,000 here, the rest 10,000 per harel_maintain call (queues.unpark_through;
--   ADR 0038), so that the call's work, and the time it holds the queue's row, do not grow
--   with the number of parked groups. A changed rate starts every key afresh (the queue's
--   key_rates rows deleted); groups deferred under the previous rate keep their start
--   times.
-- Locks: up to 1,000 parked groups, FOR NO KEY UPDATE SKIP LOCKED (harel_unpark_queue:
--   never waits), taken before the queue's row; then the queue's row (an UPDATE: it waits
--   for a key-limited claim holding it, briefly), held to the end of the caller's
--   transaction, the last thing this function does but the key_rates delete and the
--   notification; harel_ensure_queue's when it creates the queue.
-- Indexes: queues' key; transport_groups_ready from the parked band, per level (the page,
--   and the greatest parked tag left).
-- Errors: 22023 for a limit out of range, or a rate without its period (or the reverse);
--   harel_queue_id's (P0002: an unknown name, not to be created).
--
-- Steps:
--   1. Check the limits; the queue's id (harel_queue_id); its limits as they are (read,
--      not locked).
--   2. No running limit now, or a higher one: give back the first 1,000 parked groups
--      (harel_unpark_queue).
--   3. Lock the queue's row and read its limits again (another operator's change may have
--      committed meanwhile); still raised: the greatest parked tag left, if any. Update the
--      row, unpark_through set to that tag (kept if an earlier change's is greater). A
--      changed rate: delete the queue's key_rates rows.
--   4. Wake listening workers when the transaction commits (harel_notify).
CREATE OR REPLACE FUNCTION @schema@.harel_set_key_limits(
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
    -- the groups given back in the operator's call (harel_maintain gives back the rest)
    c_page   CONSTANT INT := 1000;
    v_through BIGINT;
BEGIN
    IF p_concurrency_limit NOT BETWEEN 1 AND 1000000 OR p_rate_limit NOT BETWEEN 1 AND 1000000
       OR p_rate_period_ms NOT BETWEEN 1 AND 86400000
       OR (p_rate_limit IS NULL) <> (p_rate_period_ms IS NULL) THEN
        RAISE EXCEPTION 'harel_set_key_limits: a key''s concurrency limit is 1 to 1000000, its rate limit 1 to 1000000 per 1 ms to 1 day'
            USING ERRCODE = '22023';
    END IF;
    v_queue := @schema@.harel_queue_id(p_queue, p_create);
    -- (not locked: the page below is given back before the queue's row is locked, so that
    -- claims, which lock that row, never wait for it)
    SELECT q.key_concurrency_limit INTO v_before FROM @schema@.queues q WHERE q.id = v_queue;
    IF v_before IS NOT NULL
       AND (p_concurrency_limit IS NULL OR p_concurrency_limit > v_before) THEN
        PERFORM @schema@.harel_unpark_queue(v_queue, NULL, c_page);
    END IF;
    SELECT q.key_concurrency_limit, q.key_rate_limit, q.key_rate_period_ms
      INTO v_before, v_rate, v_period
      FROM @schema@.queues q WHERE q.id = v_queue FOR NO KEY UPDATE;
    -- Under the lock (decided from the limit as it is now: another operator's change may
    -- have committed since the read above), no claim parks a group: the greatest parked tag
    -- left is where harel_maintain's pages stop (groups parked after this, under the new
    -- limit, stay parked).
    IF v_before IS NOT NULL
       AND (p_concurrency_limit IS NULL OR p_concurrency_limit > v_before) THEN
        SELECT max((SELECT g.fair_tag FROM @schema@.transport_groups g
                     WHERE g.queue_id = v_queue AND g.priority = l.level
                       AND g.fair_tag >= c_parked
                     ORDER BY g.fair_tag DESC
                     LIMIT 1))
          INTO v_through
          FROM generate_series(0, 4) AS l(level);
    END IF;
    UPDATE @schema@.queues q
       SET key_concurrency_limit = p_concurrency_limit, key_rate_limit = p_rate_limit,
           key_rate_period_ms = p_rate_period_ms,
           -- groups left to give back; an earlier change's still pending are kept
           unpark_through = GREATEST(q.unpark_through, v_through)
     WHERE q.id = v_queue;
    IF v_rate IS DISTINCT FROM p_rate_limit OR v_period IS DISTINCT FROM p_rate_period_ms THEN
        DELETE FROM @schema@.key_rates kr WHERE kr.queue_id = v_queue;
    END IF;
    PERFORM @schema@.harel_notify(NULL);
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_set_key_limits(TEXT, INT, INT, BIGINT, BOOLEAN) FROM PUBLIC;
