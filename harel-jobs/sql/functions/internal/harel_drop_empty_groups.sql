-- harel_drop_empty_groups: called by harel_claim and harel_settle (never by a role) for
-- groups they hold and found without a visible message. Deletes the rows that really are
-- empty, and frees the others (a publisher's message committed meanwhile, or a publisher
-- still holds KEY SHARE: its message will become visible when it commits).
--
-- The delete needs FOR UPDATE, which conflicts with a publisher's KEY SHARE; SKIP LOCKED
-- so we never wait on an application transaction. After taking the lock, the emptiness is
-- checked again in a new statement, whose fresh snapshot sees every message committed before
-- the lock was granted; later publishers block on our lock and then insert a new row.
CREATE OR REPLACE FUNCTION @schema@.harel_drop_empty_groups(
    p_groups     TEXT[],
    -- how long a group whose publisher is still open waits before it is looked at again
    p_recheck_ms INT
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_lockable TEXT[];
    v_deleted  TEXT[];
BEGIN
    -- Every statement reaches each group by its key, one lookup per input (never a walk of
    -- the table comparing each row with the whole array), and writes it by the TID that
    -- lookup found: the callers hold these rows, so that version is the current one.
    SELECT array_agg(k.group_id) INTO v_lockable
      FROM (SELECT DISTINCT x.group_id FROM unnest(p_groups) AS x(group_id)
             ORDER BY x.group_id
            OFFSET 0) AS x
     CROSS JOIN LATERAL (SELECT g.group_id FROM @schema@.transport_groups g
                          WHERE g.group_id = x.group_id
                            FOR UPDATE SKIP LOCKED) AS k;

    WITH deleted AS (
        DELETE FROM @schema@.transport_groups g
         USING unnest(v_lockable) AS l(group_id)
         CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.transport_groups t
                              WHERE t.group_id = l.group_id
                             OFFSET 0) AS k
         WHERE g.ctid = k.row_ctid
           -- a subquery per group, not NOT EXISTS: an anti-join may walk every message
           -- when the statistics say there are none (see harel_settle's fence)
           AND (SELECT m.seq FROM @schema@.transport_messages m
                 WHERE m.group_id = g.group_id LIMIT 1) IS NULL
        RETURNING g.group_id
    )
    SELECT array_agg(d.group_id) INTO v_deleted FROM deleted d;

    -- Not deleted: free it. If we got the lock, the group has a committed message now and is
    -- claimable at once; if a publisher holds KEY SHARE, its message is not visible yet, so
    -- look again shortly rather than spin on an empty group.
    -- (An inline message is never in a group called empty: it is the head. Called from a
    -- settle, the group's inline message was just settled: it goes.)
    UPDATE @schema@.transport_groups g
       SET locked_by = NULL, head_seq = NULL, head_attempts = 0, head_started_at = NULL,
           cancel_requested_at = NULL, cancel_reason = NULL, cancel_keep_ms = NULL,
           inline_seq = NULL, inline_kind = NULL, inline_payload = NULL,
           inline_enqueued_at = NULL, inline_not_before = NULL, inline_last_error = NULL,
           inline_unique_key = NULL, inline_trace_context = NULL,
           available_at = CASE WHEN x.lockable THEN statement_timestamp()
                               ELSE clock_timestamp() + p_recheck_ms * interval '1 millisecond' END
      FROM (SELECT p.group_id, l.group_id IS NOT NULL AS lockable
              FROM (SELECT DISTINCT p.group_id FROM unnest(p_groups) AS p(group_id)) AS p
              LEFT JOIN unnest(v_lockable) AS l(group_id) ON l.group_id = p.group_id
              LEFT JOIN unnest(v_deleted) AS d(group_id) ON d.group_id = p.group_id
             WHERE d.group_id IS NULL) AS x
     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.transport_groups t
                          WHERE t.group_id = x.group_id
                         OFFSET 0) AS k
     WHERE g.ctid = k.row_ctid;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_drop_empty_groups(TEXT[], INT) FROM PUBLIC;
