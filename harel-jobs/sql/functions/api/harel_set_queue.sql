-- harel_set_queue: pause, resume or limit a named queue (migration 0007), creating it if
-- nothing was published into it yet. What an operator calls.
--
-- p_paused: true pauses (claims of the queue return nothing until it is resumed; running
-- jobs finish, publishing still works), false resumes (and wakes listening workers when
-- the transaction commits), NULL leaves it as it is. p_set_limits: whether to set the
-- limits to p_concurrency_limit and p_rate_limit per p_rate_period_ms (NULL: none);
-- false leaves them as they are. Returns the queue as it now is.
CREATE OR REPLACE FUNCTION @schema@.harel_set_queue(
    p_name              TEXT,
    p_paused            BOOLEAN,
    p_set_limits        BOOLEAN DEFAULT false,
    p_concurrency_limit INT DEFAULT NULL,
    p_rate_limit        INT DEFAULT NULL,
    p_rate_period_ms    BIGINT DEFAULT NULL
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
BEGIN
    IF p_set_limits AND (p_concurrency_limit NOT BETWEEN 1 AND 1000000
                         OR p_rate_limit NOT BETWEEN 1 AND 1000000
                         OR p_rate_period_ms NOT BETWEEN 1 AND 86400000
                         OR (p_rate_limit IS NULL) <> (p_rate_period_ms IS NULL)) THEN
        RAISE EXCEPTION 'harel_set_queue: a concurrency limit is 1 to 1000000, a rate limit 1 to 1000000 per 1 ms to 1 day'
            USING ERRCODE = '22023';
    END IF;
    v_id := @schema@.harel_ensure_queue(p_name);
    UPDATE @schema@.queues q
       SET paused_at = CASE WHEN p_paused THEN COALESCE(q.paused_at, statement_timestamp())
                            WHEN NOT p_paused THEN NULL
                            ELSE q.paused_at END,
           concurrency_limit = CASE WHEN p_set_limits THEN p_concurrency_limit
                                    ELSE q.concurrency_limit END,
           rate_limit = CASE WHEN p_set_limits THEN p_rate_limit ELSE q.rate_limit END,
           rate_period_ms = CASE WHEN p_set_limits THEN p_rate_period_ms
                                 ELSE q.rate_period_ms END
     WHERE q.id = v_id;
    IF p_paused IS NOT NULL AND NOT p_paused OR p_set_limits THEN
        PERFORM @schema@.harel_notify(NULL);
    END IF;
    RETURN QUERY
    SELECT q.name, q.paused_at, q.concurrency_limit, q.rate_limit, q.rate_period_ms
      FROM @schema@.queues q
     WHERE q.id = v_id;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_set_queue(TEXT, BOOLEAN, BOOLEAN, INT, INT, BIGINT)
    FROM PUBLIC;
