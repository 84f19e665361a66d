-- harel_job_steps: the durable steps a job recorded (ADR 0032), by name: their names,
-- sizes and times, not their results. An operator's entry point (`jobs show`, a job's
-- page).
--
-- Takes:
--   p_id     the job's id
--   p_limit  1 to 1,000
-- Returns at most p_limit + 1 steps in name order: name, bytes (its result's JSON),
--   recorded_at (a row past p_limit says more are left).
-- Fence: none: it reads.
-- Locks: none.
-- Indexes: job_steps' key (job_id, name).
-- Errors: 22023 for a limit out of range.
CREATE OR REPLACE FUNCTION "harel".harel_job_steps(
    p_id    BIGINT,
    p_limit INT
) RETURNS TABLE (name TEXT, bytes INT, recorded_at TIMESTAMPTZ)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_job_steps: need a limit of 1 to 1000' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT s.name, s.bytes, s.recorded_at FROM "harel".job_steps s
     WHERE s.job_id = p_id
     ORDER BY s.name
     LIMIT p_limit + 1;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_job_steps(BIGINT, INT) FROM PUBLIC;
