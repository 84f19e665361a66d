-- harel_drop_empty_groups: deletes the rows of the given groups that hold no message, and
-- frees the others. Internal: called by harel_claim, harel_settle and harel_move_on for
-- groups they hold (or have just ended the lease of) and found without a visible message.
--
-- Takes:
--   p_groups      the groups (duplicates allowed)
--   p_recheck_ms  how long a group that a publisher is still adding to waits before it is
--                 claimable again
-- Returns: nothing.
-- Fence: a group is deleted only under its FOR UPDATE lock and only if a statement started
--   after that lock sees no message in it; every other group is freed, never deleted.
-- Locks: FOR UPDATE SKIP LOCKED on each group row, in group order; never waits. A
--   publisher's KEY SHARE (its message not committed yet) makes it skip the row; later
--   publishers wait for this lock, then insert a new row.
-- Indexes: transport_groups' key (one lookup per group; rows written by the TID it found);
--   transport_messages' key (group_id, seq) for the emptiness check.
-- Errors: none of its own.
--
-- Steps:
--   1. Lock each distinct group FOR UPDATE SKIP LOCKED, in group order.
--   2. A new statement, whose snapshot sees every message committed before the locks were
--      granted: delete the locked rows that hold no message.
--   3. Free every group not deleted (lease, head, cancel request and inline message
--      cleared): claimable now if it was locked (it has a committed message), else after
--      p_recheck_ms (a publisher holds KEY SHARE: look again shortly rather than spin on
--      an empty group).
CREATE OR REPLACE FUNCTION "harel".harel_drop_empty_groups(
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
    v_recheck  TIMESTAMPTZ;
    v_now      TIMESTAMPTZ := statement_timestamp();
BEGIN
    -- Every statement reaches each group by its key, one lookup per input (never a walk of
    -- the table comparing each row with the whole array), and writes it by the TID that
    -- lookup found: the callers hold these rows, so that version is the current one.
    SELECT array_agg(k.group_id) INTO v_lockable
      FROM (SELECT DISTINCT x.group_id FROM unnest(p_groups) AS x(group_id)
             ORDER BY x.group_id
            OFFSET 0) AS x
     CROSS JOIN LATERAL (SELECT g.group_id FROM "harel".transport_groups g
                          WHERE g.group_id = x.group_id
                            FOR UPDATE SKIP LOCKED) AS k;

    WITH deleted AS (
        DELETE FROM "harel".transport_groups g
         USING unnest(v_lockable) AS l(group_id)
         CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM "harel".transport_groups t
                              WHERE t.group_id = l.group_id
                             OFFSET 0) AS k
         WHERE g.ctid = k.row_ctid
           -- a subquery per group, not NOT EXISTS: an anti-join may walk every message
           -- when the statistics say there are none (see harel_settle's fence)
           AND (SELECT m.seq FROM "harel".transport_messages m
                 WHERE m.group_id = g.group_id LIMIT 1) IS NULL
        RETURNING g.group_id
    )
    SELECT array_agg(d.group_id) INTO v_deleted FROM deleted d;

    -- Not deleted: free it. If we got the lock, the group has a committed message now and is
    -- claimable at once; if a publisher holds KEY SHARE, its message is not visible yet, so
    -- look again shortly rather than spin on an empty group.
    -- (An inline message is never in a group called empty: it is the head. Called from a
    -- settle, the group's inline message was just settled: it goes.)
    -- (the times in variables, taken before: Citus takes no non-immutable function in a
    -- modification's CASE)
    v_recheck := clock_timestamp() + p_recheck_ms * interval '1 millisecond';
    UPDATE "harel".transport_groups g
       SET locked_by = NULL, head_seq = NULL, head_attempts = 0, head_started_at = NULL,
           cancel_requested_at = NULL, cancel_reason = NULL, cancel_keep_ms = NULL,
           inline_seq = NULL, inline_kind = NULL, inline_payload = NULL,
           inline_enqueued_at = NULL, inline_not_before = NULL, inline_last_error = NULL,
           inline_unique_key = NULL, inline_trace_context = NULL,
           -- timed: a claim promotes it when it is due
           fair_tag = NULL,
           available_at = CASE WHEN x.lockable THEN v_now ELSE v_recheck END
      FROM (SELECT p.group_id, l.group_id IS NOT NULL AS lockable
              FROM (SELECT DISTINCT p.group_id FROM unnest(p_groups) AS p(group_id)) AS p
              LEFT JOIN unnest(v_lockable) AS l(group_id) ON l.group_id = p.group_id
              LEFT JOIN unnest(v_deleted) AS d(group_id) ON d.group_id = p.group_id
             WHERE d.group_id IS NULL) AS x
     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM "harel".transport_groups t
                          WHERE t.group_id = x.group_id
                         OFFSET 0) AS k
     WHERE g.ctid = k.row_ctid;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_drop_empty_groups(TEXT[], INT) FROM PUBLIC;
