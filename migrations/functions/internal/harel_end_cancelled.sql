-- harel_end_cancelled: ends the head of each group as cancelled and moves the group on.
-- Internal: called by harel_cancel (a head that is not running), harel_cancel_group,
-- harel_settle (the lease of a head whose cancel was asked for while it ran) and
-- harel_claim (such a lease that lapsed), all holding the groups' rows locked.
--
-- Takes:
--   p_groups   the groups; each row carries the cancel's reason and keep period
--             (cancel_reason, cancel_keep_ms)
--   p_resolve  false: the caller resolves the cancelled jobs' dependents itself
--             (harel_cancel_waiting's callers)
-- Returns: nothing.
-- Fence: none of its own: the callers hold the rows and decided. A head already in
--   job_history is not recorded again.
-- Locks: none beyond the callers' (and harel_resolve_dependents', which never waits).
-- Indexes: transport_groups' key; transport_messages' key (group_id, seq); job_history's
--   key.
-- Errors: none of its own.
--
-- Steps, per group in group order (scalar statements: cancels are rare, and each looks its
-- rows up by key):
--   1. The head: the group's inline message while the row has one, else its first message,
--      deleted from transport_messages.
--   2. Record it in job_history as cancelled: the attempts and start of its attempt if it
--      was the claimed head, the group's cancel_reason, kept cancel_keep_ms, its queue's
--      name.
--   3. Free its unique key (harel_release_key, not completed).
--   4. harel_move_on: the group is freed behind every waiting group, or dropped.
--   5. The jobs that waited for the cancelled ones: harel_resolve_dependents (unless
--      p_resolve is false).
CREATE OR REPLACE FUNCTION "harel".harel_end_cancelled(
    p_groups  TEXT[],
    p_resolve BOOLEAN DEFAULT true
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now     TIMESTAMPTZ := statement_timestamp();
    g         RECORD;
    m         RECORD;
    v_ended   BIGINT[] := ARRAY[]::bigint[];
    v_queue   TEXT;
BEGIN
    FOR g IN SELECT * FROM "harel".transport_groups t
              WHERE t.group_id = ANY (p_groups) ORDER BY t.group_id LOOP
        -- (read on its own: Citus takes no subquery in an INSERT … VALUES)
        SELECT qs.name INTO v_queue FROM "harel".queues qs WHERE qs.id = g.queue_id;
        IF g.inline_seq IS NOT NULL THEN
            INSERT INTO "harel".job_history
                   (id, group_id, kind, payload, priority, state, attempts, last_error,
                    enqueued_at, started_at, finished_at, cancel_reason, keep_until, queue,
                    fair_key)
            VALUES (g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
                    'cancelled',
                    CASE WHEN g.head_seq = g.inline_seq THEN g.head_attempts ELSE 0 END,
                    g.inline_last_error, g.inline_enqueued_at,
                    CASE WHEN g.head_seq = g.inline_seq THEN g.head_started_at END, v_now,
                    g.cancel_reason,
                    v_now + COALESCE(g.cancel_keep_ms, 0) * interval '1 millisecond',
                    v_queue,
                    g.fair_key)
            ON CONFLICT (id) DO NOTHING;
            IF g.inline_unique_key IS NOT NULL THEN
                PERFORM "harel".harel_release_key(g.inline_unique_key, g.inline_seq, false);
            END IF;
            v_ended := v_ended || g.inline_seq;
        ELSE
            DELETE FROM "harel".transport_messages t
             WHERE t.group_id = g.group_id
               AND t.seq = (SELECT f.seq FROM "harel".transport_messages f
                             WHERE f.group_id = g.group_id ORDER BY f.seq LIMIT 1)
            RETURNING t.* INTO m;
            IF m.seq IS NOT NULL THEN
                INSERT INTO "harel".job_history
                       (id, group_id, kind, payload, priority, state, attempts, last_error,
                        enqueued_at, started_at, finished_at, cancel_reason, keep_until, queue,
                    fair_key)
                VALUES (m.seq, m.group_id, m.kind, m.payload, m.priority, 'cancelled',
                        CASE WHEN g.head_seq = m.seq THEN g.head_attempts ELSE m.attempts END,
                        m.last_error, m.enqueued_at,
                        CASE WHEN g.head_seq = m.seq THEN g.head_started_at END, v_now,
                        g.cancel_reason,
                        v_now + COALESCE(g.cancel_keep_ms, 0) * interval '1 millisecond',
                        v_queue,
                    g.fair_key)
                ON CONFLICT (id) DO NOTHING;
                IF m.unique_key IS NOT NULL THEN
                    PERFORM "harel".harel_release_key(m.unique_key, m.seq, false);
                END IF;
                v_ended := v_ended || m.seq;
            END IF;
        END IF;

        PERFORM "harel".harel_move_on(g.group_id);
    END LOOP;
    -- the jobs that waited for these are cancelled in turn (or run, if they asked to)
    IF p_resolve AND cardinality(v_ended) > 0 THEN
        PERFORM "harel".harel_resolve_dependents(
            v_ended, array_fill('cancelled'::text, ARRAY[cardinality(v_ended)]));
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_end_cancelled(TEXT[], BOOLEAN) FROM PUBLIC;
