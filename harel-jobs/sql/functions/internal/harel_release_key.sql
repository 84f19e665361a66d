-- harel_release_key: ends a job's hold on its unique key as the job leaves the queue.
-- Internal: called by harel_settle, harel_cancel and harel_end_cancelled.
--
-- Takes:
--   p_key        the unique key
--   p_job        the job (its id) that held it
--   p_completed  the job completed (acked or retained); false: it died or was cancelled
-- Returns: nothing.
-- Fence: keyed on the key AND the job: a key another job has taken over since is left
--   alone.
-- Locks: the unique_keys row it updates or deletes (waits for a transaction writing it).
-- Indexes: unique_keys' key.
-- Errors: none of its own.
--
-- Steps:
--   1. Completed, and the key was taken with a hold period: it stays held until that long
--      after now ("at most once per period"); done.
--   2. Otherwise the key is deleted: free.
CREATE OR REPLACE FUNCTION @schema@.harel_release_key(
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
DECLARE
    v_now_utc TIMESTAMP := statement_timestamp() AT TIME ZONE 'UTC';
BEGIN
    IF p_completed THEN
        UPDATE @schema@.unique_keys u
           -- (in UTC, timestamp + interval, the time a parameter: Citus takes no
           -- non-immutable function given a column in an UPDATE; the same instant)
           SET held_until = (v_now_utc + u.hold_ms * interval '1 millisecond') AT TIME ZONE 'UTC'
         WHERE u.key = p_key AND u.job_id = p_job AND u.hold_ms IS NOT NULL;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    DELETE FROM @schema@.unique_keys u WHERE u.key = p_key AND u.job_id = p_job;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_release_key(TEXT, BIGINT, BOOLEAN) FROM PUBLIC;
