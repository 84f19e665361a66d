-- harel_take_key: a unique job (migration 0005) asks for its key. Internal: called by
-- harel_publish, never by a role.
--
-- Returns p_job if the job now holds the key, or the id of the job that holds it (the new
-- job is a duplicate and must not be queued). A key is held while its job is queued
-- (waiting, scheduled, running or retrying) and, if it was taken with a hold period, until
-- that long after the job completed.
--
-- Race-free: the insert of a key another open transaction is inserting waits for that
-- transaction (and takes the key if it rolls back). A duplicate is answered without a lock
-- (a settle releasing the key must never wait for the caller's transaction); taking over a
-- key whose hold is over, or whose job is gone without a release (a worker of a release
-- before 0005 settled it), is a conditional update on the holder read, tried again if
-- another transaction changed the key meanwhile.
CREATE OR REPLACE FUNCTION @schema@.harel_take_key(
    p_key     TEXT,
    p_job     BIGINT,
    p_hold_ms BIGINT
) RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_holder BIGINT;
    v_until  TIMESTAMPTZ;
BEGIN
    -- a few rounds at most: each one that does not return saw the key released meanwhile
    FOR round IN 1..100 LOOP
        INSERT INTO @schema@.unique_keys (key, job_id, hold_ms)
        VALUES (p_key, p_job, p_hold_ms)
        ON CONFLICT (key) DO NOTHING;
        IF FOUND THEN
            RETURN p_job;
        END IF;

        SELECT u.job_id, u.held_until INTO v_holder, v_until
          FROM @schema@.unique_keys u
         WHERE u.key = p_key;
        IF FOUND THEN
            IF v_until IS NOT NULL THEN
                -- its job completed: held until the period is over
                IF v_until > clock_timestamp() THEN
                    RETURN v_holder;
                END IF;
            ELSIF EXISTS (SELECT 1 FROM @schema@.transport_messages m WHERE m.seq = v_holder)
               OR EXISTS (SELECT 1 FROM @schema@.transport_groups g
                           WHERE g.group_id = 'own:' || lpad(v_holder::text, 19, '0')
                             AND g.inline_seq = v_holder)
               OR EXISTS (SELECT 1 FROM @schema@.transport_groups g
                           WHERE g.inline_seq = v_holder
                             AND g.group_id <> 'own:' || lpad(g.inline_seq::text, 19, '0')) THEN
                RETURN v_holder;
            END IF;
            UPDATE @schema@.unique_keys u
               SET job_id = p_job, hold_ms = p_hold_ms, held_until = NULL
             WHERE u.key = p_key AND u.job_id = v_holder
               AND u.held_until IS NOT DISTINCT FROM v_until;
            IF FOUND THEN
                RETURN p_job;
            END IF;
            CONTINUE; -- changed hands meanwhile: look again
        END IF;
        -- released between the two statements: insert again
    END LOOP;
    -- (the key is not in the message: it may be made of a payload)
    RAISE EXCEPTION 'harel_take_key: a unique key kept changing hands; try again'
        USING ERRCODE = '40001';
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_take_key(TEXT, BIGINT, BIGINT) FROM PUBLIC;
