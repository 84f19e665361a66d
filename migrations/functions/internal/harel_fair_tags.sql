-- harel_fair_tags: the start tags of groups entering the ready domain (ADR 0030): per
-- group, max(V, F) + rank × quantum. V is the level's virtual time: its lowest ready tag,
-- or, when the queue has a greater tag started (fair_v_q<queue>) is lower, that one (a
-- level starved by a higher one keeps its own, so that its newcomers do not queue behind
-- its backlog); with nothing ready at the level, the queue's greatest tag started. F is the
-- key's greatest ready tag at the level (parked ones, in the band above 2^62, excluded), rank the group's place among the call's groups of
-- the same queue, level and key (in array order), and the quantum 100,000 / the key's
-- weight. So the lowest tags interleave the keys that have ready work in proportion to
-- their weights, however many groups each has. Internal: called by harel_publish,
-- harel_settle, harel_claim and harel_move_on for the groups they make ready.
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
--   transport_groups_ready_by_key, one backward probe above V only (the entries above the
--   lowest ready tag are live: the claims start the lowest tags, so it reads no dead entry
--   whatever an old snapshot keeps); fair_keys' key.
-- Errors: none of its own.
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
    -- each distinct (queue, level) of the call, with the queue's V and ready floor
    v_lq      SMALLINT[];
    v_lp      SMALLINT[];
    v_lv      BIGINT[];
    v_lf      BIGINT[];
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
        SELECT g.fair_tag INTO v_top
          FROM "harel".transport_groups g
         WHERE g.queue_id = p_queues[1] AND g.priority = p_priorities[1]
           AND g.fair_key = p_keys[1] AND g.fair_tag > v_v AND g.fair_tag < c_parked
         ORDER BY g.fair_tag DESC
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

    -- the sequences read in a statement of their own, that reads no table: on Citus a
    -- statement that reads the schema's tables runs on the worker node, where the
    -- schema's sequences do not exist
    SELECT array_agg(l.queue_id), array_agg(l.priority),
           array_agg(COALESCE(pg_sequence_last_value(
               ('"harel".fair_v_q' || l.queue_id)::regclass), 0)),
           array_agg(COALESCE(pg_sequence_last_value(
               ('"harel".fair_floor_q' || l.queue_id)::regclass), 0))
      INTO v_lq, v_lp, v_lv, v_lf
      FROM (SELECT DISTINCT u.queue_id, u.priority
              FROM unnest(p_queues, p_priorities) AS u(queue_id, priority)) AS l;
    -- each (queue, level)'s virtual time (see above) once, then each key's base
    WITH level AS MATERIALIZED (
        SELECT e.queue_id, e.priority,
               LEAST(e.v, (SELECT g.fair_tag
                             FROM "harel".transport_groups g
                            WHERE g.queue_id = e.queue_id AND g.priority = e.priority
                              AND g.fair_tag >= e.floor
                            ORDER BY g.fair_tag
                            LIMIT 1)) AS v
          FROM unnest(v_lq, v_lp, v_lv, v_lf) AS e(queue_id, priority, v, floor)
    ), base AS MATERIALIZED (
        SELECT d.queue_id, d.priority, d.fair_key,
               GREATEST(v.v, (SELECT g.fair_tag
                                FROM "harel".transport_groups g
                               WHERE g.queue_id = d.queue_id AND g.priority = d.priority
                                 AND g.fair_key = d.fair_key AND g.fair_tag > v.v
                                 AND g.fair_tag < c_parked
                               ORDER BY g.fair_tag DESC
                               LIMIT 1)) AS base,
               round(c_quantum / COALESCE((SELECT k.weight FROM "harel".fair_keys k
                                            WHERE k.queue_id = d.queue_id
                                              AND k.key = d.fair_key), 1))::bigint
                   AS quantum
          FROM (SELECT DISTINCT u.queue_id, u.priority, u.fair_key
                  FROM unnest(p_queues, p_priorities, p_keys)
                       AS u(queue_id, priority, fair_key)) AS d
          JOIN level v ON v.queue_id = d.queue_id AND v.priority = d.priority
    )
    SELECT array_agg(b.base + x.rank * b.quantum ORDER BY x.ord)
      INTO v_tags
      FROM (SELECT u.ord, u.queue_id, u.priority, u.fair_key,
                   row_number() OVER (PARTITION BY u.queue_id, u.priority, u.fair_key
                                      ORDER BY u.ord) AS rank
              FROM unnest(p_queues, p_priorities, p_keys) WITH ORDINALITY
                   AS u(queue_id, priority, fair_key, ord)) AS x
      JOIN base b
        ON b.queue_id = x.queue_id AND b.priority = x.priority
       AND b.fair_key IS NOT DISTINCT FROM x.fair_key;
    RETURN v_tags;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_fair_tags(SMALLINT[], SMALLINT[], TEXT[]) FROM PUBLIC;
