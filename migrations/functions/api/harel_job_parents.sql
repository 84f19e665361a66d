-- harel_job_parents: the jobs a pending job still waits for (ADR 0033), in id order. An
-- operator's entry point (`jobs show`, a job's page).
--
-- Takes:
--   p_id     the job's id
--   p_limit  1 to 1,000
-- Returns at most p_limit + 1 parent ids, in id order (a row past p_limit says more are
--   left); none for a job that waits for nothing.
-- Fence: none: it reads.
-- Locks: none.
-- Indexes: job_dependencies_by_job.
-- Errors: 22023 for a limit out of range.
CREATE OR REPLACE FUNCTION "harel".harel_job_parents(
    p_id    BIGINT,
    p_limit INT
) RETURNS TABLE (parent_id BIGINT)
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
        RAISE EXCEPTION 'harel_job_parents: need a limit of 1 to 1000' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT d.parent_id FROM "harel".job_dependencies d
     WHERE d.job_id = p_id
     ORDER BY d.parent_id
     LIMIT p_limit + 1;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_job_parents(BIGINT, INT) FROM PUBLIC;
