-- harel-jobs migration 0007: named queues, pause and resume, limits across the fleet.
--
-- - A job goes into a named queue (`#[job(queue = "mail")]`); a group belongs to the queue of
--   the message that created it. Queue 0 is 'default', where every job went before. Named
--   queues are created by the first publish into them (harel_ensure_queue), up to 1,000.
-- - Each queue is claimed on its own: the claim index leads with the queue, so a claim of
--   one queue never reads another's entries, and a flood in one cannot delay the others.
--   Each (queue, level) has its own claim floor (migration 0003): queue 0 keeps
--   claim_floor_<level>, queue N gets claim_floor_q<N>_<level> when it is created.
-- - `paused_at`: a paused queue is not claimed (publishing into it still works).
-- - `concurrency_limit`: at most that many of the queue's jobs run at once across every
--   worker; `rate_limit` per `rate_period_ms`: at most that many start per period. A claim of
--   a limited queue takes the queue's advisory lock, counts the queue's live leases through
--   `transport_groups_limited` (only leases taken while the limit was set are in it), and
--   keeps a rate limit's state in the sequence queue_rate_q<N> (outside MVCC: no dead rows
--   under an old snapshot). Unlimited queues take no lock and touch neither.
--
-- harel_publish, harel_claim and harel_schedule_fire take the queue, harel_job and
-- harel_list_jobs return it: new signatures (the old ones are dropped
-- here; `migrate` gives every role that could execute an old one the same right on the new).
DROP FUNCTION IF EXISTS "harel".harel_publish(
    TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[], TEXT[], BIGINT[]);
DROP FUNCTION IF EXISTS "harel".harel_claim(UUID, BIGINT, INT, INT, BIGINT);
DROP FUNCTION IF EXISTS "harel".harel_schedule_fire(
    TEXT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ, TEXT, TEXT, TEXT, SMALLINT);
-- a job's queue is one more column of a job's facts, and a filter of the listing
DROP FUNCTION IF EXISTS "harel".harel_job(BIGINT);
DROP FUNCTION IF EXISTS "harel".harel_list_jobs(TEXT, TEXT, TEXT, BIGINT, INT);

CREATE TABLE "harel".queues (
    id                SMALLINT    PRIMARY KEY CHECK (id BETWEEN 0 AND 1000),
    name              TEXT        NOT NULL UNIQUE,
    paused_at         TIMESTAMPTZ,
    concurrency_limit INT         CHECK (concurrency_limit BETWEEN 1 AND 1000000),
    rate_limit        INT         CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period_ms    BIGINT      CHECK (rate_period_ms BETWEEN 1 AND 86400000),
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((rate_limit IS NULL) = (rate_period_ms IS NULL))
);
INSERT INTO "harel".queues (id, name) VALUES (0, 'default');
CREATE SEQUENCE "harel".queue_ids AS SMALLINT MINVALUE 1 MAXVALUE 1000 START WITH 1;

ALTER TABLE "harel".transport_groups
    ADD COLUMN queue_id      SMALLINT NOT NULL DEFAULT 0,
    -- the queue of a lease taken while that queue had a concurrency limit (NULL otherwise,
    -- and once the lease ends): the limit counts these
    ADD COLUMN limited_queue SMALLINT;

DROP INDEX "harel".transport_groups_claimable;
CREATE INDEX transport_groups_claimable
    ON "harel".transport_groups (queue_id, priority, available_at);
CREATE INDEX transport_groups_limited
    ON "harel".transport_groups (limited_queue, available_at)
    WHERE limited_queue IS NOT NULL;

-- a dead letter goes back to its queue when retried; finished jobs remember theirs (by
-- name: queues are never renamed, and reading it takes no right on the queues table)
ALTER TABLE "harel".dead_letters ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE "harel".job_history ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
CREATE SEQUENCE "harel".queue_rate_q0 AS BIGINT MINVALUE 0 START WITH 0;
