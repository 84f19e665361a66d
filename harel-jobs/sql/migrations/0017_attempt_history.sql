-- harel-jobs migration 0017: every attempt of a job, for the operator who asks why it failed
-- (ADR 0034); operators' changes to queues that do not exist refused unless asked to create.
--
-- - `job_attempts`: one row per attempt that ended in failure (retried later, or dead):
--   when it started and ended, the worker pool that ran it, and the error as stored on the
--   job. Written by harel_settle in the transaction that ends the attempt, from the rows
--   its fence locked: nothing for an attempt that succeeds, so a job that completes on its
--   first attempt costs nothing more than before. The last attempt of a completed or
--   cancelled job is where it always was (job_history, which now says which worker ran
--   it); an attempt whose lease lapsed (its worker died or lost it) left no row, and
--   harel_job_attempts says so.
-- - Bounded per job: at most the 100 most recent failed attempts are kept (older rows go
--   when a newer one is written).
-- - Kept as long as the job is anywhere (queued, retrying, in job_history or in
--   dead_letters); the rows of jobs that are gone are deleted by harel_maintain, which
--   walks the table in key order from `attempt_sweep` (a sequence, outside MVCC, as
--   step_sweep is), 1,000 rows a call.
--
-- harel_settle takes the worker's id (a new argument, default NULL): a new signature, the
-- old one dropped here (`migrate` gives every role that could execute it the same right on
-- the new one; the previous release's workers call the new one unchanged, and their
-- attempts record no worker).
DROP FUNCTION IF EXISTS @schema@.harel_settle(
    TEXT[], BIGINT[], UUID[], TEXT[], BIGINT[], TEXT[], BOOLEAN[], INT[], UUID, UUID);

-- harel_set_queue, harel_set_key_limits and harel_set_fair_weight take `p_create` (default
-- true, what the previous release did: its operators call them unchanged); this release's
-- client passes false unless asked to create the queue, so that a typo does not make a
-- paused or limited queue no job ever goes to. New signatures: the old ones dropped here.
DROP FUNCTION IF EXISTS @schema@.harel_set_queue(TEXT, BOOLEAN, BOOLEAN, INT, INT, BIGINT);
DROP FUNCTION IF EXISTS @schema@.harel_set_key_limits(TEXT, INT, INT, BIGINT);
DROP FUNCTION IF EXISTS @schema@.harel_set_fair_weight(TEXT, TEXT, INT);

CREATE TABLE @schema@.job_attempts (
    job_id     BIGINT      NOT NULL,  -- the job's id (its message's seq)
    attempt    INT         NOT NULL,  -- 1 for the first
    -- when the attempt began (NULL: claimed by a release before 0005)
    started_at TIMESTAMPTZ,
    ended_at   TIMESTAMPTZ NOT NULL,
    -- 'failed': retried later; 'dead': moved to dead_letters
    outcome    TEXT        NOT NULL CHECK (outcome IN ('failed', 'dead')),
    -- the worker pool whose settle ended it (its id in `workers`; NULL: a release before
    -- 0017 settled it)
    worker     UUID,
    error      TEXT,
    PRIMARY KEY (job_id, attempt)
);

CREATE SEQUENCE @schema@.attempt_sweep AS BIGINT MINVALUE 0 START WITH 0;

-- the worker pool that ran a completed job's last attempt
ALTER TABLE @schema@.job_history ADD COLUMN worker UUID;
