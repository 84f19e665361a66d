-- harel_notify: wakes idle workers when the calling transaction commits (never before: a
-- NOTIFY is delivered on commit, and dropped on rollback). Called by harel_publish for
-- messages that are due now; internal.
--
-- p_new_from is the position of the oldest group the call created (NULL if it only added to
-- existing groups). The first such position of a transaction is the payload: a worker passes
-- it to its next claim as a hint, in case the claim floor passed that group before this
-- transaction committed (see harel_claim). So a transaction sends at most two
-- notifications, however many jobs it enqueues: a plain wake-up (empty payload) and the
-- oldest new group's position. What was sent is kept in a transaction-local setting.
CREATE OR REPLACE FUNCTION "harel".harel_notify(p_new_from TIMESTAMPTZ) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    -- NULL: nothing sent yet (a setting once set reads '' in later transactions); 'woken':
    -- the plain wake-up; digits: a position
    c_sent CONSTANT TEXT := 'harel_jobs.notified_' || 'harel_harel_jobs';
    v_sent TEXT := NULLIF(current_setting(c_sent, true), '');
BEGIN
    IF p_new_from IS NOT NULL AND (v_sent IS NULL OR v_sent = 'woken') THEN
        v_sent := (extract(epoch FROM p_new_from) * 1000000)::bigint::text;
        PERFORM pg_notify('harel_harel_jobs', v_sent);
        PERFORM set_config(c_sent, v_sent, true);
    ELSIF v_sent IS NULL THEN
        PERFORM pg_notify('harel_harel_jobs', '');
        PERFORM set_config(c_sent, 'woken', true);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_notify(TIMESTAMPTZ) FROM PUBLIC;
