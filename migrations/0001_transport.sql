-- harel-jobs migration 0001: the per-group transport's tables.
--
-- The queue is two tables. `transport_messages` holds the jobs, FIFO per group by `seq`.
-- `transport_groups` holds one row per group that has messages, carrying the group's lease.
-- A claim leases a group row (FOR NO KEY UPDATE SKIP LOCKED), so concurrent claimers lease
-- different groups without waiting on each other, and one group has one consumer at a time.
-- The functions that work on them are in ../functions/, one file each.

CREATE TABLE "harel".transport_messages (
    group_id    TEXT        NOT NULL,
    seq         BIGINT      GENERATED ALWAYS AS IDENTITY,
    kind        TEXT        NOT NULL,
    payload     JSON        NOT NULL,
    -- the priority asked for at publish; the group's priority is the one of its first message
    priority    SMALLINT    NOT NULL CHECK (priority BETWEEN 0 AND 4),
    enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- NULL: due at once; otherwise the message may not start before this time
    not_before  TIMESTAMPTZ,
    -- attempts made while the message was not its group's current head (see head_attempts)
    attempts    INT         NOT NULL DEFAULT 0,
    last_error  TEXT,
    -- (group_id, seq) is both the key and the head-of-group lookup: one index per message
    PRIMARY KEY (group_id, seq)
) WITH (fillfactor = 90);

CREATE TABLE "harel".transport_groups (
    group_id      TEXT        PRIMARY KEY,
    priority      SMALLINT    NOT NULL CHECK (priority BETWEEN 0 AND 4),
    -- When the group may next be claimed. While free it is the time the group became free
    -- (first publish, last ack), so ordering by it is round-robin: a group that was just
    -- served goes behind every group that has been waiting. While leased it is the lease
    -- expiry, while parked (retry backoff) the end of the park. Never NULL, so a claim is one
    -- index range scan on (priority, available_at <= now()) in index order: no sort, no
    -- COALESCE, and its cost does not grow with the number of waiting groups.
    available_at  TIMESTAMPTZ NOT NULL,
    -- the lease token while leased or parked, NULL while free
    locked_by     UUID,
    -- the message the current attempt count belongs to, and that count (counted at claim,
    -- so a worker that dies mid-job still used up an attempt)
    head_seq      BIGINT,
    head_attempts INT         NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

CREATE INDEX transport_groups_claimable
    ON "harel".transport_groups (priority, available_at);

CREATE TABLE "harel".dead_letters (
    id          BIGINT      PRIMARY KEY,  -- the message's seq
    group_id    TEXT        NOT NULL,
    kind        TEXT        NOT NULL,
    payload     JSON        NOT NULL,
    priority    SMALLINT    NOT NULL,
    attempts    INT         NOT NULL,
    last_error  TEXT        NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL,
    failed_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX dead_letters_failed_at ON "harel".dead_letters (failed_at, id);

-- The queue tables churn (every job is inserted, updated and deleted): vacuum them early
-- and often, so dead row versions never pile up in front of the claim's index scan.
ALTER TABLE "harel".transport_groups SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE "harel".transport_messages SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
