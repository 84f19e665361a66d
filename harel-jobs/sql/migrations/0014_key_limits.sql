-- harel-jobs migration 0014: a limit on the running jobs of each fairness key of a queue,
-- fleet-wide (ADR 0031).
--
-- - `queues.key_concurrency_limit`: at most this many of a key's jobs of the queue leased
--   at once over every worker (NULL: none). Set by harel_set_key_limits.
-- - The claims of such a queue run one at a time (the queue's row lock, as a limited
--   queue's do), count each candidate key's live leases through
--   transport_groups_limited_by_key, lease up to the key's room, and *park* the rest: a
--   parked group keeps its place in the ready domain, its tag raised by 2^62 (the parked
--   band, above every start tag), so the claims walk past a saturated key's backlog once,
--   not at every claim. A settle gives each key back as many parked groups as it ended
--   leases of that key (re-tagged by harel_fair_tags); a claim that reaches the band
--   (nothing else ready) leases parked groups whose key has room, so nothing waits there
--   for ever.
-- - Leases of a key-limited queue are marked with the queue's id in `limited_queue`, as a
--   limited queue's are, and indexed by key: each key's running count is a range of at most
--   its limit (plus lapsed leases not yet reclaimed).
-- - harel_fair_keys returns each key's running jobs and the queue's key limit: a new
--   signature, the old one dropped here (`migrate` gives every role that could execute it
--   the same right on the new one).
DROP FUNCTION IF EXISTS @schema@.harel_fair_keys(TEXT, TEXT, INT);

ALTER TABLE @schema@.queues
    ADD COLUMN key_concurrency_limit INT
        CHECK (key_concurrency_limit BETWEEN 1 AND 1000000);

CREATE INDEX transport_groups_limited_by_key
    ON @schema@.transport_groups (limited_queue, fair_key, available_at)
    WHERE limited_queue IS NOT NULL;
