-- harel_purge_dead_letters: deletes up to p_limit of the dead letters that failed before
-- p_before, the oldest failures first. An operator's entry point (DeadLetters::purge, the
-- command line's `dead purge`, which call it until a call deletes fewer than p_limit): the
-- operators' role gets EXECUTE on this instead of DELETE on the table (see
-- harel_delete_dead_letters).
--
-- Takes:
--   p_before  the letters that failed before this time
--   p_limit   1 to 10,000: the most letters one call deletes
-- Returns: how many it deleted (fewer than p_limit: none are left that failed before
--   p_before, in this snapshot).
-- Fence: bounded work: at most p_limit rows read, by index.
-- Locks: the letters' rows (deleted); no table lock beyond the DELETE's ROW EXCLUSIVE.
-- Indexes: dead_letters_failed_at (failed_at, id); dead_letters' key.
-- Errors: 22023 for a NULL or infinite time, or a limit out of range.
--
-- Steps:
--   1. Check the arguments.
--   2. Delete the first p_limit letters by (failed_at, id) that failed before p_before.
CREATE OR REPLACE FUNCTION @schema@.harel_purge_dead_letters(p_before TIMESTAMPTZ, p_limit INT)
RETURNS INT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_n INT;
BEGIN
    IF p_before IS NULL OR NOT isfinite(p_before)
       OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'harel_purge_dead_letters: need a finite time and a limit of 1 to 10000'
            USING ERRCODE = '22023';
    END IF;

    DELETE FROM @schema@.dead_letters l
     WHERE l.id IN (SELECT x.id FROM @schema@.dead_letters x
                     WHERE x.failed_at < p_before
                     ORDER BY x.failed_at, x.id
                     LIMIT p_limit);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_purge_dead_letters(TIMESTAMPTZ, INT) FROM PUBLIC;
