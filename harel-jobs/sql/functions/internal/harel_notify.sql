-- harel_notify: wakes idle workers when the calling transaction commits (a NOTIFY is
-- delivered on commit, and dropped on rollback). Internal: called by harel_publish for
-- messages due now, and by harel_set_queue when a queue is resumed or its limits change.
--
-- Takes:
--   p_position  where the call's oldest due group is, or NULL: a group in the ready domain
--               is at its tag less 2^62 (negative, so below every time, and the lowest of
--               several hints, as a worker keeps the least, is the lowest tag); a timed one
--               at its available_at in microseconds since the epoch
-- Returns: nothing.
-- Fence: at most two notifications per transaction on @channel@, however many jobs it
--   enqueues: a plain wake-up (empty payload) and the first p_position, which a worker passes to its next claim as p_hint (harel_claim). What
--   was sent is kept in the transaction-local setting harel_jobs.notified_<channel>.
-- Locks: none during the call; at commit, PostgreSQL's notify queue lock (transactions
--   that notify commit one at a time).
-- Indexes: none.
-- Errors: none of its own.
--
-- Steps:
--   1. Read what this transaction sent: nothing, the wake-up ('woken'), or a position.
--   2. A p_position and no position sent yet: send the position and record it.
--   3. Otherwise, if nothing was sent: send the wake-up and record 'woken'.
CREATE OR REPLACE FUNCTION @schema@.harel_notify(p_position BIGINT) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    -- NULL: nothing sent yet (a setting once set reads '' in later transactions); 'woken':
    -- the plain wake-up; digits: a position
    c_sent CONSTANT TEXT := 'harel_jobs.notified_' || @channel@;
    v_sent TEXT := NULLIF(current_setting(c_sent, true), '');
BEGIN
    IF p_position IS NOT NULL AND (v_sent IS NULL OR v_sent = 'woken') THEN
        v_sent := p_position::text;
        PERFORM pg_notify(@channel@, v_sent);
        PERFORM set_config(c_sent, v_sent, true);
    ELSIF v_sent IS NULL THEN
        PERFORM pg_notify(@channel@, '');
        PERFORM set_config(c_sent, 'woken', true);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_notify(BIGINT) FROM PUBLIC;
