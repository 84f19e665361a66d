-- harel_fair_tags: the start tags of groups entering the ready domain (ADR 0030): per
-- group, max(V, F) + rank × quantum. V is the level's virtual time: its lowest ready tag,
-- or, when the queue has a greater tag started (fair_v_q<queue>) is lower, that one (a
-- level starved by a higher one keeps its own, so that its newcomers do not queue behind
-- its backlog); with nothing ready at the level, the queue's greatest tag started. F is the
-- key's greatest ready tag at the level (parked ones, in the band above 2^62, excluded),
-- rank the group's place among the call's groups of the same queue, level and key (in
-- array order), and the quantum 100,000 / the key's weight. So the lowest tags interleave
-- the keys that have ready work in proportion to their weights, however many groups each
-- has. Its cost is a sort of the call's groups and a probe per distinct key (ADR 0038).
-- Internal: called by harel_publish, harel_settle, harel_claim, harel_move_on,
-- harel_release_waiting, harel_run_now, harel_set_key_limits' and harel_maintain's
-- harel_unpark_queue for the groups they make ready.
--
-- Takes, one element per group:
--   p_queues      the group's queue id
--   p_priorities  its level, 0 to 4
--   p_keys        its fairness key ('' for none; NULL: a partition of its own, never read)
-- Returns: the tags, in input order; each above the queue's ready floor (V is).
-- Fence: none; reads only. Two callers tagging groups of one key at once may draw equal
--   tags (ties cost a bounded unfairness, not a lock).
-- Locks: none.
-- Indexes: per distinct (queue, level): transport_groups_ready from the queue's ready
--   floor (its first live entry); per distinct (queue, level, key):
--   transport_groups_ready_by_key, one backward probe from the parked band down within the
--   key, in that index's order whatever the statistics (sorts disabled): it stops at the
--   key's first entry above V (the entries above the lowest ready tag are live: the claims
--   start the lowest tags), or, for a key with nothing ready, at the key's end, having read
--   the key's own older entries (dead ones an old snapshot keeps included); fair_keys' key,
--   only when a key of the call's queues has a weight.
-- Errors: none of its own.
--
-- Steps:
--   1. One group, or groups of one queue, level and key: V and the key's base by scalar
--      statements; the tags a quantum apart.
--   2. Otherwise: V per (queue, level) (scalar when the batch has one); whether any key of
--      the call's queues has a weight; then one pass over the batch sorted by (queue,
--      level, key, order): each key's first group probes its base and quantum, a window
--      spreads them over the key's groups, each tag base + rank × quantum.
CREATE OR REPLACE FUNCTION "harel".harel_fair_tags(
    p_queues     SMALLINT[],
    p_priorities SMALLINT[],
    p_keys       TEXT[]
) RETURNS BIGINT[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
-- every table reached by key: never a walk of a small table comparing each row
SET enable_seqscan = off
-- and each key's probe by transport_groups_ready_by_key, in its order: a walk of
-- transport_groups_ready filtered on the key would need a sort (see the probe below)
SET enable_sort = off
AS $$
#variable_conflict use_column
DECLARE
    -- a weight-1 key's step; weights of 1 to 1,000 give steps of 100,000 to 100
    c_quantum CONSTANT DOUBLE PRECISION := 100000::double precision;
    -- the parked band (harel_claim): a parked group's tag is not its key's place in line
    c_parked  CONSTANT BIGINT := 4611686018427387904;
    v_v       BIGINT;
    v_floor   BIGINT;
    v_top     BIGINT;
    v_head    BIGINT;
    v_quantum BIGINT;
    v_weight  INT;
    v_tags    BIGINT[];
    -- each distinct queue of the call, with its V and its ready floor (sequences)
    v_sq      SMALLINT[];
    v_sv      BIGINT[];
    v_sf      BIGINT[];
    -- each (queue, level) of the call, as queue × 5 + level, and its virtual time
    v_levels  INT[];
    v_level_vs BIGINT[];
    -- whether a key of the call's queues has a weight
    v_weighted BOOLEAN;
BEGIN
    -- one group (a single enqueue, a settle of one), or groups of one queue, level and key
    -- (the common batch: jobs without a key): scalar statements, each tag a quantum after
    -- the one before
    IF cardinality(p_queues) = 1
       OR (p_queues[1] = ALL (p_queues) AND p_priorities[1] = ALL (p_priorities)
           AND p_keys[1] = ALL (p_keys)) THEN
        v_v := COALESCE(pg_sequence_last_value(
                   ('"harel".fair_v_q' || p_queues[1])::regclass), 0);
        v_floor := COALESCE(pg_sequence_last_value(
                       ('"harel".fair_floor_q' || p_queues[1])::regclass), 0);
        SELECT g.fair_tag INTO v_head
          FROM "harel".transport_groups g
         WHERE g.queue_id = p_queues[1] AND g.priority = p_priorities[1]
           AND g.fair_tag >= v_floor
         ORDER BY g.fair_tag
         LIMIT 1;
        v_v := LEAST(v_v, v_head);
        -- (the key's range as two bounds, in the index's order: see the general path)
        SELECT g.fair_tag INTO v_top
          FROM "harel".transport_groups g
         WHERE g.queue_id = p_queues[1] AND g.priority = p_priorities[1]
           AND g.fair_key >= p_keys[1] AND g.fair_key <= p_keys[1]
           AND g.fair_tag > v_v AND g.fair_tag < c_parked
         ORDER BY g.fair_key DESC, g.fair_tag DESC
         LIMIT 1;
        SELECT k.weight INTO v_weight
          FROM "harel".fair_keys k
         WHERE k.queue_id = p_queues[1] AND k.key = p_keys[1];
        v_quantum := round(c_quantum / COALESCE(v_weight, 1))::bigint;
        v_v := GREATEST(v_v, v_top);
        IF cardinality(p_queues) = 1 THEN
            RETURN ARRAY[v_v + v_quantum];
        END IF;
        RETURN ARRAY(SELECT v_v + i * v_quantum
                       FROM generate_series(1, cardinality(p_queues)) AS i);
    END IF;

    IF p_queues[1] = ALL (p_queues) AND p_priorities[1] = ALL (p_priorities) THEN
        -- one (queue, level), the common batch: its virtual time as above
        v_v := COALESCE(pg_sequence_last_value(
                   ('"harel".fair_v_q' || p_queues[1])::regclass), 0);
        v_floor := COALESCE(pg_sequence_last_value(
                       ('"harel".fair_floor_q' || p_queues[1])::regclass), 0);
        SELECT g.fair_tag INTO v_head
          FROM "harel".transport_groups g
         WHERE g.queue_id = p_queues[1] AND g.priority = p_priorities[1]
           AND g.fair_tag >= v_floor
         ORDER BY g.fair_tag
         LIMIT 1;
        v_levels := ARRAY[p_queues[1] * 5 + p_priorities[1]];
        v_level_vs := ARRAY[LEAST(v_v, v_head)];
        v_sq := ARRAY[p_queues[1]];
    ELSE
        -- the sequences read in a statement of their own, that reads no table: on Citus a
        -- statement that reads the schema's tables runs on the worker node, where the
        -- schema's sequences do not exist
        SELECT array_agg(q.queue_id),
               array_agg(COALESCE(pg_sequence_last_value(
                   ('"harel".fair_v_q' || q.queue_id)::regclass), 0)),
               array_agg(COALESCE(pg_sequence_last_value(
                   ('"harel".fair_floor_q' || q.queue_id)::regclass), 0))
          INTO v_sq, v_sv, v_sf
          FROM (SELECT DISTINCT u.queue_id FROM unnest(p_queues) AS u(queue_id)) AS q;
        -- each (queue, level)'s virtual time, one probe each, as (queue × 5 + level, V)
        SELECT array_agg(e.queue_id * 5 + e.priority),
               array_agg(LEAST(v_sv[e.i], (SELECT g.fair_tag
                                             FROM "harel".transport_groups g
                                            WHERE g.queue_id = e.queue_id
                                              AND g.priority = e.priority
                                              AND g.fair_tag >= v_sf[e.i]
                                            ORDER BY g.fair_tag
                                            LIMIT 1)))
          INTO v_levels, v_level_vs
          FROM (SELECT l.queue_id, l.priority, array_position(v_sq, l.queue_id) AS i
                  FROM (SELECT DISTINCT u.queue_id, u.priority
                          FROM unnest(p_queues, p_priorities) AS u(queue_id, priority)) AS l)
               AS e;
    END IF;
    -- whether any key of the call's queues has a weight (most queues have none: then no
    -- key is looked up in fair_keys)
    v_weighted := EXISTS (SELECT 1 FROM unnest(v_sq) AS q(queue_id)
                           WHERE EXISTS (SELECT 1 FROM "harel".fair_keys k
                                          WHERE k.queue_id = q.queue_id));
    -- Then one pass over the batch in (queue, level, key, order) order, no join: each key's
    -- first group probes its base and quantum, a window spreads them over its groups. (It
    -- joined the batch to its distinct keys on `IS NOT DISTINCT FROM`, which cannot hash: a
    -- nested loop, the batch times its keys; 10,000 keys took 29 s.) The keys are sorted
    -- bytewise (COLLATE "C"): only equal keys must meet, and a collation's comparison costs
    -- more. A NULL key is a partition of its own, as in any PARTITION BY; its probe finds
    -- nothing (base V, weight 1), and its tags are never read.
    SELECT array_agg(b.base + b.rank * b.quantum ORDER BY b.ord)
      INTO v_tags
      FROM (SELECT k.ord, k.rank,
                   max(k.base) OVER w_key AS base, max(k.quantum) OVER w_key AS quantum
              FROM (SELECT x.ord, x.queue_id, x.priority, x.fair_key, x.rank,
                           -- the key's base: its greatest ready tag above V (the parked
                           -- band excluded), else V: one backward probe per key, of
                           -- transport_groups_ready_by_key, the one index in the order
                           -- (key, tag) the ORDER BY asks for (the key as two bounds, not
                           -- `=`, which would make it a constant of the order), with
                           -- sorts disabled. A generic plan made with statistics of a
                           -- nearly empty table walked transport_groups_ready backwards
                           -- instead, filtering on the key: every ready group of the level
                           -- above V, per key (10,000 keys given back beside 70,000 ready
                           -- groups: 248 s).
                           CASE WHEN x.rank = 1 THEN
                               GREATEST(v_level_vs[array_position(v_levels,
                                                                  x.queue_id * 5 + x.priority)],
                                        (SELECT g.fair_tag
                                           FROM "harel".transport_groups g
                                          WHERE g.queue_id = x.queue_id
                                            AND g.priority = x.priority
                                            AND g.fair_key >= x.fair_key
                                            AND g.fair_key <= x.fair_key
                                            AND g.fair_tag > v_level_vs[array_position(
                                                    v_levels, x.queue_id * 5 + x.priority)]
                                            AND g.fair_tag < c_parked
                                          ORDER BY g.fair_key DESC, g.fair_tag DESC
                                          LIMIT 1))
                           END AS base,
                           CASE WHEN x.rank = 1 THEN
                               round(c_quantum / COALESCE(
                                   CASE WHEN v_weighted THEN
                                       (SELECT fk.weight FROM "harel".fair_keys fk
                                         WHERE fk.queue_id = x.queue_id
                                           AND fk.key = x.fair_key)
                                   END, 1))::bigint
                           END AS quantum
                      FROM (SELECT u.ord, u.queue_id, u.priority, u.fair_key,
                                   row_number() OVER (
                                       PARTITION BY u.queue_id, u.priority,
                                                    u.fair_key COLLATE "C"
                                       ORDER BY u.ord) AS rank
                              FROM unnest(p_queues, p_priorities, p_keys) WITH ORDINALITY
                                   AS u(queue_id, priority, fair_key, ord)) AS x
                   ) AS k
            WINDOW w_key AS (PARTITION BY k.queue_id, k.priority, k.fair_key COLLATE "C")
           ) AS b;
    RETURN v_tags;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_fair_tags(SMALLINT[], SMALLINT[], TEXT[]) FROM PUBLIC;
