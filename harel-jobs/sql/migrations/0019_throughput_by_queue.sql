-- harel-jobs migration 0019: what the worker pools did per minute, by queue (issue 30: the
-- dashboard's chart split by queue).
--
-- - `throughput.queue`: the queue a row counts (part of the key: a pool has a row per
--   queue it did something in, each minute). The rows written before this migration, and
--   those of a pool that does not say by queue, count under '' (not by queue), except that
--   a pool serving exactly one queue counts under that queue.
-- - `workers.counted_queues`, `counted_succeeded`, `counted_failed`, `counted_dead`: a
--   pool's totals by queue at its last report (aligned arrays, at most 1,000 queues), from
--   which the next report's increase per queue is taken. NULL for a pool that reports no
--   split (the previous release's).
--
-- harel_worker_report takes the totals by queue (four more arguments, default NULL: the
-- previous release's workers call the new one unchanged); the old signature is dropped here
-- (`migrate` gives every role that could execute it the same right on the new one).
-- harel_throughput keeps its signature and sums every queue.
DROP FUNCTION IF EXISTS @schema@.harel_worker_report(
    UUID, TEXT, INT, TEXT[], INT, INT, BIGINT, BIGINT, BIGINT, BOOLEAN);

-- (three statements: Citus refuses ADD CONSTRAINT beside other subcommands)
ALTER TABLE @schema@.throughput ADD COLUMN queue TEXT NOT NULL DEFAULT '';
ALTER TABLE @schema@.throughput DROP CONSTRAINT throughput_pkey;
ALTER TABLE @schema@.throughput ADD PRIMARY KEY (minute, worker, queue);

ALTER TABLE @schema@.workers
    ADD COLUMN counted_queues    TEXT[],
    ADD COLUMN counted_succeeded BIGINT[],
    ADD COLUMN counted_failed    BIGINT[],
    ADD COLUMN counted_dead      BIGINT[];
