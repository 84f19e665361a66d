-- harel_queued_state: the state of a queued job (a message of transport_messages or its
-- group's inline message), the one place that says it. Internal: called by harel_job and
-- harel_list_jobs. IMMUTABLE: it reads nothing.
--
-- Takes:
--   p_is_head     the group's head_seq is this job (a claim counted attempts for it)
--   p_locked      the group row carries a lease token (a lease, live or lapsed)
--   p_available   the group's available_at
--   p_attempts    the attempts counted for the job
--   p_not_before  the job's not-before time (NULL: due at once)
--   p_now         the caller's now
-- Returns:
--   'running'    its group is leased at it and the lease has not lapsed
--   'pending'    it waits for the jobs it depends on (not before the pending time,
--                9999-12-31: harel_publish, ADR 0033)
--   'retrying'   an attempt was made (it failed, or its worker died): the next may start
--                when the group's park ends, or at once after a lapsed lease
--   'scheduled'  not before its not-before time, or (the head, given back without using an
--                attempt: a snooze) not before its group's park ends
--   'waiting'    due: it waits for a worker, or for the jobs before it in its group
-- Fence, locks, indexes: none. Errors: none.
CREATE OR REPLACE FUNCTION "harel".harel_queued_state(
    p_is_head     BOOLEAN,
    p_locked      BOOLEAN,
    p_available   TIMESTAMPTZ,
    p_attempts    INT,
    p_not_before  TIMESTAMPTZ,
    p_now         TIMESTAMPTZ
) RETURNS TEXT
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
BEGIN
    IF p_is_head AND p_locked AND p_available > p_now THEN
        RETURN 'running';
    ELSIF p_not_before >= timestamptz '9999-12-31 00:00:00+00' THEN
        RETURN 'pending';
    ELSIF p_attempts > 0 THEN
        RETURN 'retrying';
    ELSIF p_not_before > p_now OR (p_is_head AND NOT p_locked AND p_available > p_now) THEN
        RETURN 'scheduled';
    END IF;
    RETURN 'waiting';
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_queued_state(
    BOOLEAN, BOOLEAN, TIMESTAMPTZ, INT, TIMESTAMPTZ, TIMESTAMPTZ) FROM PUBLIC;
