-- harel_delete_dead_letters: deletes dead letters by id, at most 1,000 a call. An
-- operator's entry point (DeadLetters::delete, delete_many; the command line's `dead
-- delete`, the dashboard's bulk delete): the operators' role gets EXECUTE on this instead
-- of DELETE on the table, which would also let it LOCK the table in any mode but ACCESS
-- SHARE and so stop every dead settle, the retries and housekeeping for as long as it liked.
--
-- Takes:
--   p_ids  the letters' ids, 1 to 1,000 of them (repeats count once each time they appear)
-- Returns: the ids of the letters deleted (those that existed), in id order.
-- Fence: the DELETE: two deletes of one letter delete it once.
-- Locks: the letters' rows (deleted), in id order; no table lock beyond the DELETE's
--   ROW EXCLUSIVE.
-- Indexes: dead_letters' key.
-- Errors: 22023 for NULL, none or more than 1,000 ids.
--
-- Steps:
--   1. Check the arguments.
--   2. Delete the letters, returning their ids in id order.
CREATE OR REPLACE FUNCTION "harel".harel_delete_dead_letters(p_ids BIGINT[])
RETURNS TABLE (id BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_delete_dead_letters: need 1 to 1000 ids'
            USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH d AS (
        DELETE FROM "harel".dead_letters l WHERE l.id = ANY (p_ids)
        RETURNING l.id
    )
    SELECT d.id FROM d ORDER BY d.id;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_delete_dead_letters(BIGINT[]) FROM PUBLIC;
