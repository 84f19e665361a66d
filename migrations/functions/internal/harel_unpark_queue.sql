-- harel_unpark_queue: gives one page of a queue's parked groups back to the ready domain
-- after its limit per fairness key was raised or removed (ADR 0038): the lowest parked tags,
-- highest level first, re-tagged behind their keys' ready groups by fair share
-- (harel_fair_tags). Internal: called by harel_set_key_limits (the first page, in the
-- operator's call) and harel_maintain (the next ones, while queues.unpark_through is set).
--
-- Takes:
--   p_queue    the queue's id
--   p_through  the greatest parked tag to give back (NULL: any)
--   p_limit    at most this many groups
-- Returns: how many parked groups it took (locked); fewer than p_limit means that none is
--   left up to p_through, but for groups other transactions held.
-- Fence: only groups still parked when read (a claim or a settle may have decided about one
--   since); a group whose key has no room under the current limit is parked again by the
--   next claim that meets it (a step, never a limit).
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on the groups taken (never waits: a claim holding
--   one is deciding about it already, and a settle's unpark gives it back itself).
-- Indexes: per level a range of transport_groups_ready from the parked band; transport_groups'
--   key for the groups taken; harel_fair_tags' probes.
-- Errors: none of its own.
--
-- Steps:
--   1. Lock up to p_limit parked groups of the queue (tag >= 2^62, <= p_through), highest
--      level first, lowest tags first. (Only locks: its snapshot may predate a commit that
--      changed one.)
--   2. A new statement: those still parked, their levels and keys, in that order; their tags
--      from harel_fair_tags (a statement of its own); each row updated by its TID.
CREATE OR REPLACE FUNCTION "harel".harel_unpark_queue(
    p_queue   SMALLINT,
    p_through BIGINT,
    p_limit   INT
) RETURNS INT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- the parked band (harel_claim)
    c_parked CONSTANT BIGINT := 4611686018427387904;
    v_groups TEXT[];
    v_ctids  TID[];
    v_levels SMALLINT[];
    v_keys   TEXT[];
    v_tags   BIGINT[];
BEGIN
    SELECT array_agg(p.group_id ORDER BY p.level DESC, p.fair_tag)
      INTO v_groups
      FROM (SELECT l.level, c.group_id, c.fair_tag
              FROM generate_series(4, 0, -1) AS l(level)
             CROSS JOIN LATERAL (
                    SELECT g.group_id, g.fair_tag
                      FROM "harel".transport_groups g
                     WHERE g.queue_id = p_queue AND g.priority = l.level
                       AND g.fair_tag >= c_parked
                       AND g.fair_tag <= COALESCE(p_through, 9223372036854775807)
                     ORDER BY g.fair_tag
                     LIMIT p_limit
                       FOR NO KEY UPDATE SKIP LOCKED) AS c
             LIMIT p_limit) AS p;
    IF v_groups IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(t.row_ctid ORDER BY t.ord), array_agg(t.priority ORDER BY t.ord),
           array_agg(t.fair_key ORDER BY t.ord)
      INTO v_ctids, v_levels, v_keys
      FROM unnest(v_groups) WITH ORDINALITY AS k(group_id, ord)
     CROSS JOIN LATERAL (SELECT k.ord, g.ctid AS row_ctid, g.priority, g.fair_key
                           FROM "harel".transport_groups g
                          WHERE g.group_id = k.group_id AND g.fair_tag >= c_parked
                         OFFSET 0) AS t;
    IF v_ctids IS NOT NULL THEN
        v_tags := "harel".harel_fair_tags(
            array_fill(p_queue, ARRAY[cardinality(v_ctids)]), v_levels, v_keys);
        UPDATE "harel".transport_groups g
           SET fair_tag = x.tag
          FROM unnest(v_ctids, v_tags) AS x(row_ctid, tag)
         WHERE g.ctid = x.row_ctid;
    END IF;
    RETURN cardinality(v_groups);
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_unpark_queue(SMALLINT, BIGINT, INT) FROM PUBLIC;
