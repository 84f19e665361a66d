-- harel_queued_state: the state of a queued job (one in transport_messages or inline in its
-- group row), for harel_job and harel_list_jobs: the one place that says it. Internal.
--   running    its group is leased at it and the lease has not lapsed
--   retrying   an attempt was made (it failed, or its worker died): `at` is when the next
--              one may start (the park's end, or the lapsed lease's: at once)
--   scheduled  not before its not-before time, or (the group's head, given back without
--              using an attempt: a snooze) not before its group's park ends
--   waiting    due, waiting for a worker or for the jobs before it in its group
-- p_is_head: the group's head_seq is this job; p_attempts: the attempts counted for it.
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
