-- harel_retry_dead_letters: deletes dead letters and publishes each again (same group, at
-- its end; kind, payload, priority, queue, trace context and fairness key), in id order. A
-- letter of a job without a group (its group named 'own:' and its old seq) goes back without
-- one, into a group of its own. An operator's entry point (DeadLetters::retry).
--
-- (A function rather than one statement of the Rust side: on Citus a statement that touches
-- the schema's tables runs whole on the worker node, harel_publish with it, where the schema's
-- sequences do not exist. Here the DELETE is one statement and harel_publish is called from
-- another, that reads no table.)
--
-- Takes:
--   p_ids  the letters' ids
-- Returns: (old id, new id) for each letter found, in id order.
-- Fence: the DELETE: two retries of one letter publish it once.
-- Locks: the letters' rows (deleted); then harel_publish's.
-- Indexes: dead_letters' key.
-- Errors: harel_publish's.
CREATE OR REPLACE FUNCTION @schema@.harel_retry_dead_letters(p_ids BIGINT[])
RETURNS TABLE (old_id BIGINT, new_id BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids        BIGINT[];
    v_groups     TEXT[];
    v_kinds      TEXT[];
    v_payloads   TEXT[];
    v_priorities SMALLINT[];
    v_queues     TEXT[];
    v_traces     TEXT[];
    v_fair_keys  TEXT[];
    v_n          INT;
BEGIN
    WITH d AS (
        DELETE FROM @schema@.dead_letters l WHERE l.id = ANY (p_ids)
        RETURNING l.id, l.group_id, l.kind, l.payload, l.priority, l.queue, l.trace_context,
                  l.fair_key
    )
    SELECT array_agg(d.id ORDER BY d.id),
           array_agg(CASE WHEN d.group_id !~ '^own:[0-9]{19}$' THEN d.group_id END
                     ORDER BY d.id),
           array_agg(d.kind ORDER BY d.id),
           array_agg(d.payload::text ORDER BY d.id),
           array_agg(d.priority ORDER BY d.id),
           array_agg(d.queue ORDER BY d.id),
           array_agg(d.trace_context ORDER BY d.id),
           array_agg(d.fair_key ORDER BY d.id),
           count(*)::int
      INTO v_ids, v_groups, v_kinds, v_payloads, v_priorities, v_queues, v_traces,
           v_fair_keys, v_n
      FROM d;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_ids[p.n]::bigint, p.s
      FROM @schema@.harel_publish(
               v_groups, v_kinds, v_payloads, v_priorities,
               array_fill(NULL::timestamptz, ARRAY[v_n]),
               array_fill(NULL::bigint, ARRAY[v_n]), NULL, NULL, v_queues, v_traces,
               v_fair_keys)
           WITH ORDINALITY AS p (s, n)
     ORDER BY p.n;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_retry_dead_letters(BIGINT[]) FROM PUBLIC;
