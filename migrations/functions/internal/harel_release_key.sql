-- harel_release_key: a job that held a unique key (migration 0005) left the queue. Internal:
-- called by the functions that end jobs, never by a role.
--
-- Completed (p_completed) with a hold period: the key stays held until the period is over
-- ("at most once per period"). Otherwise (no period, dead, cancelled): the key is free.
-- Keyed on the job too: a key another job has taken over since is left alone.
CREATE OR REPLACE FUNCTION "harel".harel_release_key(
    p_key       TEXT,
    p_job       BIGINT,
    p_completed BOOLEAN
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_completed THEN
        UPDATE "harel".unique_keys u
           SET held_until = statement_timestamp() + u.hold_ms * interval '1 millisecond'
         WHERE u.key = p_key AND u.job_id = p_job AND u.hold_ms IS NOT NULL;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    DELETE FROM "harel".unique_keys u WHERE u.key = p_key AND u.job_id = p_job;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_release_key(TEXT, BIGINT, BOOLEAN) FROM PUBLIC;
