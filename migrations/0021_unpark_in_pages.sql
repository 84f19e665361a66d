-- harel-jobs migration 0021: a raised or removed limit per fairness key gives the parked
-- groups back in pages (issue 42, item 2; ADR 0038).
--
-- - `queues.unpark_through`: while set, the queue still has groups parked under an earlier,
--   lower limit per key, up to this tag of the parked band (2^62 + start tag), to be given
--   back to the ready domain. harel_set_key_limits gives back the first 1,000 in the
--   operator's call and sets it when more are left; harel_maintain gives back the next
--   10,000 a call, oldest first, and clears it when none is left. NULL: none pending.
-- - `queues_unpark_pending`: the queues with such a marker, for harel_maintain to find
--   without walking the table (a partial index: the other queues write no entry).
--
-- Self-contained: no data changes; a schema upgraded while groups were parked under a limit
-- that an older release raised has none of them pending (that release gave them back).
ALTER TABLE "harel".queues ADD COLUMN unpark_through BIGINT;
CREATE INDEX queues_unpark_pending
    ON "harel".queues (id) WHERE unpark_through IS NOT NULL;
