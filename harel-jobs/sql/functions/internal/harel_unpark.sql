-- harel_unpark: gives fairness keys of key-limited queues back parked groups, one for each
-- lease of the key that ended (ADR 0031): the lowest parked tags of the key, highest level
-- first, tagged at the front of their level's line (its virtual time, in their order), so
-- the room the ended lease left goes to the key's oldest waiting group at the next claim,
-- not to the back of the key's backlog. Internal: called by harel_settle for the leases it
-- ended in limited queues.
--
-- Takes, one element per ended lease:
--   p_queues  the group's queue id
--   p_keys    its fairness key
-- Returns: nothing.
-- Fence: only queues that have a key limit; at most as many groups per key as leases of
--   the key ended. A claim parks again what it cannot lease, so giving back one too many
--   costs a step, never a limit.
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on the parked groups taken (never waits: a claim
--   holding one is deciding about it already).
-- Indexes: queues' key; per (queue, key, level) a range of transport_groups_ready_by_key
--   from the parked band; transport_groups' key for the groups taken; per (queue, level)
--   taken, transport_groups_ready from the ready floor (its first live entry).
-- Errors: none of its own.
--
-- Steps:
--   1. Per (queue, key) of a key-limited queue, the number of leases ended; lock that many
--      of its parked groups, highest level first, lowest tags first. (Only locks: its
--      snapshot may predate a commit that changed one.)
--   2. A new statement: those still parked get tags from their level's virtual time (the
--      queue's greatest tag started, or the level's lowest ready tag if lower: harel_fair_tags'
--      V), one apart, in that order.
CREATE OR REPLACE FUNCTION @schema@.harel_unpark(
    p_queues SMALLINT[],
    p_keys   TEXT[]
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
-- each key's parked groups by transport_groups_ready_by_key, in its order (harel_fair_tags)
SET enable_sort = off
AS $$
#variable_conflict use_column
DECLARE
    -- the parked band: a parked group's tag is its start tag plus this (see harel_claim)
    c_parked  CONSTANT BIGINT := 4611686018427387904;
    v_groups  TEXT[];
    v_ctids   TID[];
    v_tags    BIGINT[];
    -- each queue of the call, its V and its ready floor (sequences)
    v_sq      SMALLINT[];
    v_sv      BIGINT[];
    v_sf      BIGINT[];
BEGIN
    SELECT array_agg(p.group_id ORDER BY e.queue_id, e.fair_key, p.ord)
      INTO v_groups
      FROM (SELECT u.queue_id, u.fair_key, count(*) AS n
              FROM unnest(p_queues, p_keys) AS u(queue_id, fair_key)
             WHERE u.fair_key IS NOT NULL
             GROUP BY u.queue_id, u.fair_key) AS e
      JOIN @schema@.queues q ON q.id = e.queue_id AND q.key_concurrency_limit IS NOT NULL
     CROSS JOIN LATERAL (
            SELECT y.group_id, row_number() OVER () AS ord
              -- (the five levels as a list, not generate_series: a function scan run
              -- once per key)
              FROM (VALUES (4), (3), (2), (1), (0)) AS l(level)
             CROSS JOIN LATERAL (
                    -- (the key as two bounds, in transport_groups_ready_by_key's order:
                    -- harel_fair_tags says why)
                    SELECT g.group_id
                      FROM @schema@.transport_groups g
                     WHERE g.queue_id = e.queue_id AND g.priority = l.level
                       AND g.fair_key >= e.fair_key AND g.fair_key <= e.fair_key
                       AND g.fair_tag >= c_parked
                     ORDER BY g.fair_key, g.fair_tag
                     LIMIT e.n
                       FOR NO KEY UPDATE SKIP LOCKED) AS y
             LIMIT e.n) AS p;
    IF v_groups IS NULL THEN
        RETURN;
    END IF;
    -- the sequences read in a statement of their own, that reads no table: on Citus a
    -- statement that reads the schema's tables runs on the worker node, where the
    -- schema's sequences do not exist
    SELECT array_agg(q.queue_id),
           array_agg(COALESCE(pg_sequence_last_value(
               ('@schema@.fair_v_q' || q.queue_id)::regclass), 0)),
           array_agg(COALESCE(pg_sequence_last_value(
               ('@schema@.fair_floor_q' || q.queue_id)::regclass), 0))
      INTO v_sq, v_sv, v_sf
      FROM (SELECT DISTINCT u.queue_id FROM unnest(p_queues) AS u(queue_id)) AS q;

    SELECT array_agg(t.row_ctid ORDER BY t.ord),
           array_agg(v.base + t.rank - 1 ORDER BY t.ord)
      INTO v_ctids, v_tags
      FROM (SELECT x.ord, x.row_ctid, x.queue_id, x.priority,
                   row_number() OVER (PARTITION BY x.queue_id, x.priority ORDER BY x.ord) AS rank
              FROM unnest(v_groups) WITH ORDINALITY AS k(group_id, ord)
             CROSS JOIN LATERAL (SELECT k.ord, g.ctid AS row_ctid, g.queue_id, g.priority
                                   FROM @schema@.transport_groups g
                                  WHERE g.group_id = k.group_id AND g.fair_tag >= c_parked
                                 OFFSET 0) AS x) AS t
     CROSS JOIN LATERAL (
            SELECT LEAST(v_sv[array_position(v_sq, t.queue_id)],
                         (SELECT g.fair_tag FROM @schema@.transport_groups g
                           WHERE g.queue_id = t.queue_id AND g.priority = t.priority
                             AND g.fair_tag >= v_sf[array_position(v_sq, t.queue_id)]
                           ORDER BY g.fair_tag
                           LIMIT 1)) AS base) AS v;
    IF v_ctids IS NULL THEN
        RETURN;
    END IF;
    UPDATE @schema@.transport_groups g
       SET fair_tag = x.tag
      FROM unnest(v_ctids, v_tags) AS x(row_ctid, tag)
     WHERE g.ctid = x.row_ctid;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_unpark(SMALLINT[], TEXT[]) FROM PUBLIC;
