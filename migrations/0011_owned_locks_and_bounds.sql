-- harel-jobs migration 0011: no lock that a login outside the queue's roles can take, and
-- bounds on what the roles that may write the queue's shared state can make it hold.
--
-- - Advisory locks are one namespace for every login of the server: one granted nothing
--   could hold the keys the queue used (limited claims, housekeeping, the depth sampler's
--   election) and stop it. Every lock is now on a row of the queue's own tables, which only
--   their owner (so only the queue's functions) can lock: a limited queue's claims lock the
--   queue's row in `queues` (harel_claim), housekeeping locks its row in `elections`
--   (harel_maintain), and the depth sampler holds its row of `elections` as a lease that
--   runs out when its holder stops renewing it (harel_elect).
-- - Queue ids: the sequence `queue_ids` handed out ids in transactions that rolled back, so
--   a thousand rolled-back first enqueues into new queue names used the 1,000-queue cap up.
--   harel_ensure_queue now takes the lowest id no queue has, and the cap counts queues that
--   exist.
-- - Housekeeping sweeps the default queue and a bounded window of named queues per call,
--   moving on from where the last call stopped (`maintain_sweep`, outside MVCC), so its cost
--   does not grow with the number of queues.
-- - At most 1,000 schedules per schema (harel_schedule_fire refuses new names past that),
--   listed a page at a time with the number not shown (harel_schedules: a new signature).
-- - Worker reports: every queue name must be one, counters saturate instead of
--   overflowing, housekeeping keeps the 10,000 pools seen last, and the listing is bounded
--   with the number not shown (harel_workers: a new signature).
-- - harel_claim takes how long it may wait for a limited queue's lock (p_wait_ms): a new
--   signature.
--
-- `migrate` gives every role that could execute a dropped function the same right on its
-- new signature.
DROP FUNCTION IF EXISTS "harel".harel_claim(UUID, BIGINT, INT, INT, BIGINT, TEXT);
DROP FUNCTION IF EXISTS "harel".harel_schedules(TEXT[]);
DROP FUNCTION IF EXISTS "harel".harel_workers(BIGINT);

CREATE TABLE "harel".elections (
    -- what one worker does at a time: 'housekeeping', 'depth'
    name       TEXT        PRIMARY KEY,
    -- the worker pool holding it as a lease (NULL: nobody; housekeeping only locks the row)
    holder     UUID,
    held_until TIMESTAMPTZ
);
INSERT INTO "harel".elections (name) VALUES ('housekeeping'), ('depth');

DROP SEQUENCE IF EXISTS "harel".queue_ids;

-- the id of the last named queue housekeeping swept
CREATE SEQUENCE "harel".maintain_sweep AS BIGINT MINVALUE 0 START WITH 0;
