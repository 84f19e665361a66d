-- harel_set_queue: pauses, resumes or limits a named queue, creating it if asked to and
-- nothing was published into it yet. An operator's entry point.
--
-- Takes:
--   p_name               the queue's name (harel_ensure_queue's rule)
--   p_paused             true pauses (its claims return nothing until it is resumed;
--                        running jobs finish, publishing still works), false resumes, NULL
--                        leaves it as it is
--   p_set_limits         whether to set the limits below; false leaves them as they are
--   p_concurrency_limit  at most this many of its jobs leased at once over every worker,
--                        1 to 1,000,000 (NULL: none)
--   p_rate_limit         at most this many starts per p_rate_period_ms, 1 to 1,000,000
--                        per 1 ms to 1 day (both NULL: none)
--   p_create             create the queue if it does not exist (default true, as the
--                        previous release did); false refuses an unknown name
-- Returns the queue as it now is: name, paused_at, concurrency_limit, rate_limit,
--   rate_period_ms.
-- Fence: none beyond the checks. A pause keeps its first paused_at.
-- Locks: the queue's row (an UPDATE: it waits for a limited claim holding it, briefly);
--   harel_ensure_queue's when it creates the queue.
-- Indexes: queues' key and name.
-- Errors: 22023 for limits out of range or a rate without its period (or the reverse);
--   harel_queue_id's (P0002: an unknown name, not to be created).
--
-- Steps:
--   1. Check the limits.
--   2. The queue's id (harel_queue_id).
--   3. Update its pause and limits.
--   4. Resumed or limits set: wake listening workers when the transaction commits
--      (harel_notify).
--   5. Return its row.
CREATE OR REPLACE FUNCTION "harel".harel_set_queue(
    p_name              TEXT,
    p_paused            BOOLEAN,
    p_set_limits        BOOLEAN DEFAULT false,
    p_concurrency_limit INT DEFAULT NULL,
    p_rate_limit        INT DEFAULT NULL,
    p_rate_period_ms    BIGINT DEFAULT NULL,
    p_create            BOOLEAN DEFAULT true
) RETURNS TABLE (
    name              TEXT,
    paused_at         TIMESTAMPTZ,
    concurrency_limit INT,
    rate_limit        INT,
    rate_period_ms    BIGINT
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_id SMALLINT;
    -- (the time in a variable: Citus takes a function in an upsert's DO UPDATE SET, or a
    -- modification's CASE, only if it is immutable; a parameter it takes)
    v_now    TIMESTAMPTZ := statement_timestamp();
BEGIN
    IF p_set_limits AND (p_concurrency_limit NOT BETWEEN 1 AND 1000000
                         OR p_rate_limit NOT BETWEEN 1 AND 1000000
                         OR p_rate_period_ms NOT BETWEEN 1 AND 86400000
                         OR (p_rate_limit IS NULL) <> (p_rate_period_ms IS NULL)) THEN
        RAISE EXCEPTION 'harel_set_queue: a concurrency limit is 1 to 1000000, a rate limit 1 to 1000000 per 1 ms to 1 day'
            USING ERRCODE = '22023';
    END IF;
    v_id := "harel".harel_queue_id(p_name, p_create);
    UPDATE "harel".queues q
       SET paused_at = CASE WHEN p_paused THEN COALESCE(q.paused_at, v_now)
                            WHEN NOT p_paused THEN NULL
                            ELSE q.paused_at END,
           concurrency_limit = CASE WHEN p_set_limits THEN p_concurrency_limit
                                    ELSE q.concurrency_limit END,
           rate_limit = CASE WHEN p_set_limits THEN p_rate_limit ELSE q.rate_limit END,
           rate_period_ms = CASE WHEN p_set_limits THEN p_rate_period_ms
                                 ELSE q.rate_period_ms END
     WHERE q.id = v_id;
    IF p_paused IS NOT NULL AND NOT p_paused OR p_set_limits THEN
        PERFORM "harel".harel_notify(NULL);
    END IF;
    RETURN QUERY
    SELECT q.name, q.paused_at, q.concurrency_limit, q.rate_limit, q.rate_period_ms
      FROM "harel".queues q
     WHERE q.id = v_id;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_set_queue(TEXT, BOOLEAN, BOOLEAN, INT, INT, BIGINT,
    BOOLEAN) FROM PUBLIC;
