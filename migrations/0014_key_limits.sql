-- harel-jobs migration 0014: limits on each fairness key of a queue, fleet-wide: its
-- running jobs and its rate of starts (ADR 0031).
--
-- - `queues.key_concurrency_limit`: at most this many of a key's jobs of the queue leased
--   at once over every worker (NULL: none); `key_rate_limit` per `key_rate_period_ms`: at
--   most this many of a key's starts per period (GCRA: a burst of up to the limit after a
--   quiet period). Set by harel_set_key_limits.
-- - The claims of such a queue run one at a time (the queue's row lock, as a limited
--   queue's do), count each candidate key's live leases through
--   transport_groups_limited_by_key and read its rate state, lease up to the key's room,
--   and set the rest aside:
--   - past the key's running limit, *parked*: the group keeps its place in the ready
--     domain, its tag raised by 2^62 (the parked band, above every start tag), so the
--     claims walk past a saturated key's backlog once, not at every claim. A settle gives
--     each key back as many parked groups as it ended leases of that key; a claim that
--     reaches the band (nothing else ready) leases parked groups whose key has room, so
--     nothing waits there for ever;
--   - past the key's rate, *deferred*: timed until the start time the rate gives it, each
--     one interval after the one before, so a claim meets it again when it may start.
-- - Leases of a key-limited queue are marked with the queue's id in `limited_queue`, as a
--   limited queue's are, and indexed by key: each key's running count is a range of at most
--   its limit (plus lapsed leases not yet reclaimed).
-- - `key_rates`: a key's rate state in such a queue: its theoretical arrival time, and the
--   latest start time given to a deferred group (microseconds since the epoch). Written by
--   the claims, one at a time per queue, in their transaction (a claim that rolls back
--   leaves it as it was); housekeeping deletes the rows whose times have passed.
-- - harel_fair_keys returns each key's running jobs and the queue's limits per key: a new
--   signature, the old one dropped here (`migrate` gives every role that could execute it
--   the same right on the new one).
DROP FUNCTION IF EXISTS "harel".harel_fair_keys(TEXT, TEXT, INT);

ALTER TABLE "harel".queues
    ADD COLUMN key_concurrency_limit INT
        CHECK (key_concurrency_limit BETWEEN 1 AND 1000000),
    ADD COLUMN key_rate_limit INT CHECK (key_rate_limit BETWEEN 1 AND 1000000),
    ADD COLUMN key_rate_period_ms BIGINT CHECK (key_rate_period_ms BETWEEN 1 AND 86400000),
    ADD CONSTRAINT queues_key_rate_whole
        CHECK ((key_rate_limit IS NULL) = (key_rate_period_ms IS NULL));

CREATE TABLE "harel".key_rates (
    queue_id SMALLINT NOT NULL,
    key      TEXT     NOT NULL,
    -- the key's theoretical arrival time (GCRA)
    tat_us   BIGINT   NOT NULL,
    -- the latest start time given to a group deferred for the rate
    slot_us  BIGINT   NOT NULL,
    PRIMARY KEY (queue_id, key)
);

CREATE INDEX transport_groups_limited_by_key
    ON "harel".transport_groups (limited_queue, fair_key, available_at)
    WHERE limited_queue IS NOT NULL;
