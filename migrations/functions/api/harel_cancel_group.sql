-- harel_cancel_group: cancels the jobs of one group ("this user was deleted"), at most
-- p_limit a call, oldest first. An operator's entry point; the caller calls again while
-- `remaining` says so.
--
-- Takes:
--   p_group    the group id, 1 to 1,024 bytes
--   p_reason   kept with each cancelled job: at most 8,192 bytes, or NULL
--   p_keep_ms  how long cancelled jobs are kept in job_history, 0 to 100 years
--   p_limit    at most this many jobs cancelled now, 1 to 10,000
-- Returns one row:
--   cancelled  the jobs that ended now, as cancelled (kept in job_history for p_keep_ms
--              with p_reason, their unique keys freed)
--   requested  the running job got a cancel request, as harel_cancel gives it: it ends
--              as cancelled when its handler returns
--   remaining  jobs are left to cancel (p_limit was reached)
-- Fence: never ends the running job itself. The group row stays while that job runs and
--   goes when nothing is left.
-- Locks: FOR NO KEY UPDATE of the group row: it waits for a claim, settle or cancel holding
--   it, and holds no other row meanwhile.
-- Indexes: transport_groups' key; transport_messages' key (group_id, seq); the keys of
--   job_history and unique_keys.
-- Errors: 22023 for arguments out of range.
--
-- Steps:
--   1. Check the arguments.
--   2. Lock the group row (none: 0, false, false).
--   3. A running head: record the request. Otherwise an inline head is ended as a single
--      cancel ends it (harel_end_cancelled).
--   4. The group's messages, oldest first, never the running head, up to the limit:
--      deleted, recorded in job_history as cancelled, their unique keys freed.
--   5. Not running: the group moves on (harel_move_on: freed, or dropped when empty).
--   6. The jobs that waited for the cancelled ones: harel_resolve_dependents.
CREATE OR REPLACE FUNCTION "harel".harel_cancel_group(
    p_group   TEXT,
    p_reason  TEXT,
    p_keep_ms BIGINT,
    p_limit   INT
) RETURNS TABLE (cancelled INT, requested BOOLEAN, remaining BOOLEAN)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now       TIMESTAMPTZ;
    g           RECORD;
    v_running   BOOLEAN;
    v_count     INT := 0;
    v_deleted   BIGINT;
    v_gone      BIGINT[];
    v_more      BOOLEAN;
    -- the deleted messages' columns, in seq order, and the group's queue name
    v_kinds     TEXT[];
    v_payloads  JSON[];
    v_prios     SMALLINT[];
    v_attempts  INT[];
    v_errors    TEXT[];
    v_enqueued  TIMESTAMPTZ[];
    v_keys      TEXT[];
    v_queue     TEXT;
BEGIN
    IF p_group IS NULL OR octet_length(p_group) NOT BETWEEN 1 AND 1024
       OR p_keep_ms IS NULL OR p_keep_ms NOT BETWEEN 0 AND 3155760000000
       OR octet_length(p_reason) > 8192 OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'harel_cancel_group: need a group id of 1 to 1024 bytes, a reason of at most 8192 bytes (or NULL), a keep period of 0 to 100 years and a limit of 1 to 10000'
            USING ERRCODE = '22023';
    END IF;

    SELECT * INTO g FROM "harel".transport_groups t
     WHERE t.group_id = p_group
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, false, false;
        RETURN;
    END IF;
    v_now := clock_timestamp();
    v_running := g.locked_by IS NOT NULL AND g.available_at > v_now;

    IF v_running THEN
        UPDATE "harel".transport_groups t
           SET cancel_requested_at = COALESCE(t.cancel_requested_at, v_now),
               cancel_reason = CASE WHEN t.cancel_requested_at IS NULL THEN p_reason
                                    ELSE t.cancel_reason END,
               cancel_keep_ms = COALESCE(t.cancel_keep_ms, p_keep_ms)
         WHERE t.group_id = p_group;
    ELSIF g.inline_seq IS NOT NULL THEN
        -- the inline head (not running) first, as a single cancel ends it (the group is
        -- freed, still locked by us, or dropped if that was its only job)
        UPDATE "harel".transport_groups t
           SET cancel_requested_at = v_now, cancel_reason = p_reason,
               cancel_keep_ms = p_keep_ms
         WHERE t.group_id = p_group;
        PERFORM "harel".harel_end_cancelled(ARRAY[p_group]);
        v_count := 1;
    END IF;

    -- The queued messages, oldest first, but never the running head.
    WITH doomed AS (
        SELECT t.seq FROM "harel".transport_messages t
         WHERE t.group_id = p_group
           AND NOT (v_running AND t.seq = g.head_seq)
         ORDER BY t.seq
         LIMIT p_limit - v_count
    ), gone AS (
        DELETE FROM "harel".transport_messages t
         WHERE t.group_id = p_group AND t.seq = ANY (ARRAY(SELECT d.seq FROM doomed d))
        RETURNING t.*
    )
    SELECT array_agg(x.seq ORDER BY x.seq), array_agg(x.kind ORDER BY x.seq),
           array_agg(x.payload ORDER BY x.seq), array_agg(x.priority ORDER BY x.seq),
           array_agg(x.attempts ORDER BY x.seq), array_agg(x.last_error ORDER BY x.seq),
           array_agg(x.enqueued_at ORDER BY x.seq), array_agg(x.unique_key ORDER BY x.seq)
      INTO v_gone, v_kinds, v_payloads, v_prios, v_attempts, v_errors, v_enqueued, v_keys
      FROM gone x;
    v_deleted := COALESCE(cardinality(v_gone), 0)::bigint;
    -- (history and unique keys from the arrays, in statements of their own: Citus sent the
    -- worker node the INSERT … SELECT of a data-modifying CTE with a broken filter,
    -- "WHERE ( IS NOT NULL)": a syntax error)
    IF v_gone IS NOT NULL THEN
        SELECT qs.name INTO v_queue FROM "harel".queues qs WHERE qs.id = g.queue_id;
        INSERT INTO "harel".job_history
               (id, group_id, kind, payload, priority, state, attempts, last_error,
                enqueued_at, started_at, finished_at, cancel_reason, keep_until, queue,
                fair_key)
        SELECT x.seq, p_group, x.kind, x.payload, x.priority, 'cancelled',
               CASE WHEN x.seq = g.head_seq THEN g.head_attempts ELSE x.attempts END,
               x.last_error, x.enqueued_at,
               CASE WHEN x.seq = g.head_seq THEN g.head_started_at END, v_now, p_reason,
               v_now + p_keep_ms * interval '1 millisecond', v_queue, g.fair_key
          FROM unnest(v_gone, v_kinds, v_payloads, v_prios, v_attempts, v_errors, v_enqueued)
               AS x(seq, kind, payload, priority, attempts, last_error, enqueued_at)
        ON CONFLICT (id) DO NOTHING;
        DELETE FROM "harel".unique_keys u
         USING unnest(v_keys, v_gone) AS x(unique_key, seq)
         WHERE u.key = x.unique_key AND u.job_id = x.seq;
    END IF;
    v_count := v_count + v_deleted::int;

    IF NOT v_running THEN
        -- more than p_limit: what is left waits for the next call (in the same transaction,
        -- as Queue::cancel_group makes them, nothing of it can run meanwhile)
        v_more := "harel".harel_move_on(p_group);
    END IF;
    -- the jobs that waited for these are cancelled in turn (or run, if they asked to)
    IF v_gone IS NOT NULL THEN
        PERFORM "harel".harel_resolve_dependents(
            v_gone, array_fill('cancelled'::text, ARRAY[cardinality(v_gone)]));
    END IF;
    IF NOT v_running THEN
        RETURN QUERY SELECT v_count, false, v_more;
        RETURN;
    END IF;

    RETURN QUERY SELECT v_count, true, EXISTS (
        SELECT 1 FROM "harel".transport_messages t
         WHERE t.group_id = p_group AND t.seq <> g.head_seq);
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_cancel_group(TEXT, TEXT, BIGINT, INT) FROM PUBLIC;
