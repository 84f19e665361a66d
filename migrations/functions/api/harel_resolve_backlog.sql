-- harel_resolve_backlog: resolves a page of the dependents that the transactions ending
-- their parents left for housekeeping (dependency_backlog, ADR 0037): past the bound one
-- transaction resolves, or in a group another transaction held at that moment. A worker's
-- entry point: its housekeeping calls it about once a second, and again at once while it
-- says more are left. Any number of workers may call it at once: each takes parents the
-- others do not hold.
--
-- Takes:
--   p_rows  at most this many dependency rows resolved, 1 to 10,000
-- Returns one row:
--   parents  the backlog's parents this call worked on (0: nothing to do, or every one
--            held by another call)
--   more     rows are left in the backlog (call again)
-- Fence: harel_resolve_dependents': each dependency row resolved once, by the transaction
--   holding its dependent's group; a parent's backlog row goes when none of its rows is
--   left.
-- Locks: the backlog rows it works on, FOR UPDATE SKIP LOCKED (never waits);
--   harel_resolve_dependents' (group rows SKIP LOCKED, then job_waits rows).
-- Indexes: dependency_backlog_by_parent; harel_resolve_dependents'.
-- Errors: 22023 for p_rows out of range.
--
-- Steps:
--   1. The oldest 64 parents of the backlog no other call holds, with their outcomes.
--   2. harel_resolve_dependents for them, within p_rows (it deletes the backlog rows of
--      the parents it finishes, and leaves the others for the next call).
--   3. Whether rows are left.
CREATE OR REPLACE FUNCTION "harel".harel_resolve_backlog(p_rows INT)
RETURNS TABLE (parents INT, more BOOLEAN)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- parents a call takes at most (their rows share p_rows, round-robin)
    c_parents CONSTANT INT := 64;
    v_parents  BIGINT[];
    v_outcomes TEXT[];
BEGIN
    IF p_rows IS NULL OR p_rows NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'harel_resolve_backlog: p_rows must be 1 to 10000'
            USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(b.parent_id ORDER BY b.parent_id), array_agg(b.outcome ORDER BY b.parent_id)
      INTO v_parents, v_outcomes
      FROM (SELECT DISTINCT ON (t.parent_id) t.parent_id, t.outcome
              FROM (SELECT t.parent_id, t.outcome FROM "harel".dependency_backlog t
                     ORDER BY t.parent_id
                     LIMIT c_parents
                       FOR UPDATE SKIP LOCKED) AS t
             ORDER BY t.parent_id) AS b;
    IF v_parents IS NOT NULL THEN
        PERFORM "harel".harel_resolve_dependents(v_parents, v_outcomes, p_budget => p_rows,
                                                  p_backlog => true);
    END IF;
    RETURN QUERY SELECT COALESCE(cardinality(v_parents), 0),
                        EXISTS (SELECT 1 FROM "harel".dependency_backlog);
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_resolve_backlog(INT) FROM PUBLIC;
