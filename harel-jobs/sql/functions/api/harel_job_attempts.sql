-- harel_job_attempts: one job's attempts, newest first. An operator's entry point.
--
-- Takes:
--   p_id  the job's id (its message's seq)
-- Returns one row per attempt, newest first, at most the 100 most recent (job_attempts
--   keeps no more); none: no such job, or it never started:
--   attempt     1 for the first
--   started_at  when it began (NULL: not known)
--   ended_at    when it ended (NULL: running, or lapsed)
--   outcome     'failed' (retried later), 'dead', 'completed', 'cancelled', 'running', or
--               'lapsed': no settle ended it (its worker stopped or lost the lease, and
--               the lease ran out; or it ran before attempt history was kept)
--   worker      the worker pool that ended it (its id), NULL when not known
--   host, pid   where that pool ran, while `workers` still has it (a day)
--   error       the error recorded ('failed', 'dead'), the reason ('cancelled'), NULL
-- Fence: none: it reads. STABLE: one snapshot.
-- Locks: none.
-- Indexes: what harel_job reads; job_attempts' key; job_history's and workers' keys.
-- Errors: none of its own.
--
-- Steps:
--   1. The job (harel_job): its state and attempts counted.
--   2. The attempt numbers from 100 below the newest to the newest, each with its row in
--      job_attempts, else what the job's state says of its last attempt, else 'lapsed'.
CREATE OR REPLACE FUNCTION @schema@.harel_job_attempts(p_id BIGINT)
RETURNS TABLE (
    attempt    INT,
    started_at TIMESTAMPTZ,
    ended_at   TIMESTAMPTZ,
    outcome    TEXT,
    worker     UUID,
    host       TEXT,
    pid        INT,
    error      TEXT
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_job     RECORD;
    v_newest  INT;
    v_worker  UUID;
    -- how many attempts a job keeps (harel_record_attempts)
    c_kept CONSTANT INT := 100;
BEGIN
    SELECT j.state, j.attempts, j.started_at, j.finished_at, j.last_error, j.cancel_reason
      INTO v_job
      FROM @schema@.harel_job(p_id) AS j;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT GREATEST(v_job.attempts, max(a.attempt)) INTO v_newest
      FROM @schema@.job_attempts a WHERE a.job_id = p_id;
    IF COALESCE(v_newest, 0) = 0 THEN
        RETURN;
    END IF;
    IF v_job.state = 'completed' THEN
        SELECT h.worker INTO v_worker FROM @schema@.job_history h WHERE h.id = p_id;
    END IF;

    RETURN QUERY
    SELECT n.attempt, x.started_at, x.ended_at, x.outcome, x.worker, w.host, w.pid, x.error
      FROM generate_series(v_newest, GREATEST(1, v_newest - c_kept + 1), -1) AS n(attempt)
      LEFT JOIN LATERAL (
            SELECT a.started_at, a.ended_at, a.outcome, a.worker, a.error
              FROM @schema@.job_attempts a
             WHERE a.job_id = p_id AND a.attempt = n.attempt) AS r ON true
     CROSS JOIN LATERAL (
            SELECT r.started_at, r.ended_at, r.outcome, r.worker, r.error
             WHERE r.outcome IS NOT NULL
            UNION ALL
            -- the last attempt, as the job's state tells it
            SELECT v_job.started_at,
                   CASE WHEN v_job.state IN ('completed', 'cancelled', 'dead')
                        THEN v_job.finished_at END,
                   CASE WHEN v_job.state IN ('completed', 'cancelled', 'dead', 'running')
                        THEN v_job.state ELSE 'lapsed' END,
                   v_worker,
                   CASE v_job.state WHEN 'cancelled' THEN v_job.cancel_reason
                                    WHEN 'dead' THEN v_job.last_error END
             WHERE r.outcome IS NULL AND n.attempt = v_job.attempts
            UNION ALL
            SELECT NULL, NULL, 'lapsed', NULL, NULL
             WHERE r.outcome IS NULL AND n.attempt <> v_job.attempts) AS x
      LEFT JOIN @schema@.workers w ON w.id = x.worker
     ORDER BY n.attempt DESC;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_job_attempts(BIGINT) FROM PUBLIC;
