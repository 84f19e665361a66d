-- harel-jobs migration 0016: durable steps (ADR 0032).
--
-- - `job_steps`: the results a handler recorded with `JobContext::step`, one row per (job,
--   step name), written only by the job's lease holder (harel_record_step, fenced as a
--   settle is) and read by it (harel_steps). `result` is the step's value as JSON, kept as
--   its text (like a payload: read back as written); `bytes` is that text's length, so
--   that the limit per job is a sum over at most 1,000 small columns, never a read of the
--   results themselves.
-- - Kept as long as the job is anywhere (queued, retrying, in job_history or in
--   dead_letters): nothing on the claim's or the settle's path touches this table. The
--   rows of jobs that are gone are deleted by harel_maintain, which walks the table in key
--   order from `step_sweep` (the job id it stopped after; a sequence, outside MVCC, as
--   maintain_sweep is), 1,000 rows a call, and looks each of their jobs up by key.
CREATE TABLE @schema@.job_steps (
    job_id      BIGINT      NOT NULL,  -- the job's id (its message's seq)
    name        TEXT        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 255),
    result      JSON        NOT NULL,
    bytes       INT         NOT NULL CHECK (bytes BETWEEN 0 AND 1048576),
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name)
);

CREATE SEQUENCE @schema@.step_sweep AS BIGINT MINVALUE 0 START WITH 0;
