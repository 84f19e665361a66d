-- harel_record_attempts: records the attempts that ended in failure, and keeps each job's
-- most recent ones only. Internal: called by harel_settle, in the transaction that ends the
-- attempts, under the group locks its fence took.
--
-- Takes arrays, one element per attempt:
--   p_jobs      the job (its id)
--   p_attempts  the attempt's number (1 for the first)
--   p_started   when it began
--   p_outcomes  'failed' (retried later) or 'dead'
--   p_errors    the error as stored on the job
-- and:
--   p_ended     when they ended (the settle's time)
--   p_worker    the worker pool that settled them (NULL: not said)
-- Returns: nothing.
-- Fence: none of its own: the caller holds each job's group lease. An attempt already
--   recorded keeps what it recorded and takes the new outcome only: that is a job given up
--   on after its last attempt (a claim found it out of attempts; the handler did not run).
-- Locks: the job_attempts rows it writes and deletes.
-- Indexes: job_attempts' key (job_id, attempt).
-- Errors: none of its own.
--
-- Steps:
--   1. Insert one row per attempt (one already recorded takes the new outcome only).
--   2. For the jobs past 100 attempts, delete their rows older than their 100 most recent.
CREATE OR REPLACE FUNCTION @schema@.harel_record_attempts(
    p_jobs     BIGINT[],
    p_attempts INT[],
    p_started  TIMESTAMPTZ[],
    p_outcomes TEXT[],
    p_errors   TEXT[],
    p_ended    TIMESTAMPTZ,
    p_worker   UUID
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- how many attempts a job keeps (docs/guide/monitoring.md, "Attempt history")
    c_kept CONSTANT INT := 100;
BEGIN
    INSERT INTO @schema@.job_attempts AS a
           (job_id, attempt, started_at, ended_at, outcome, worker, error)
    SELECT x.job_id, x.attempt, x.started_at, p_ended, x.outcome, p_worker, x.error
      FROM unnest(p_jobs, p_attempts, p_started, p_outcomes, p_errors)
           AS x(job_id, attempt, started_at, outcome, error)
     WHERE x.attempt > 0
    ON CONFLICT (job_id, attempt) DO UPDATE SET outcome = EXCLUDED.outcome;

    IF EXISTS (SELECT 1 FROM unnest(p_attempts) AS x(attempt) WHERE x.attempt > c_kept) THEN
        DELETE FROM @schema@.job_attempts a
         USING unnest(p_jobs, p_attempts) AS x(job_id, attempt)
         WHERE x.attempt > c_kept
           AND a.job_id = x.job_id AND a.attempt <= x.attempt - c_kept;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_record_attempts(
    BIGINT[], INT[], TIMESTAMPTZ[], TEXT[], TEXT[], TIMESTAMPTZ, UUID) FROM PUBLIC;
