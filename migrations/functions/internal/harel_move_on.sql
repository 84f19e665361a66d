-- harel_move_on: moves a group on after its head ended outside a settle (a cancel): frees
-- it behind its key's ready groups (harel_fair_tags) when its next message is due, timed
-- until then otherwise, or drops it if it has none. Internal: called by harel_end_cancelled and harel_cancel_group, which hold the
-- group's row locked. (harel_settle does the same for a batch, set-based.)
--
-- Takes:
--   p_group  the group, its head already gone (deleted, or about to be cleared from the
--            row)
-- Returns: whether the group still has messages.
-- Fence: none of its own: the caller holds the row.
-- Locks: none beyond the caller's (and harel_drop_empty_groups' for an empty group).
-- Indexes: transport_messages' key (group_id, seq) for the next message; transport_groups'
--   key.
-- Errors: none of its own.
--
-- Steps:
--   1. Read the group's first message in transport_messages.
--   2. None: harel_drop_empty_groups (deletes the row, or frees it while a publisher adds
--      to it); return false.
--   3. Otherwise free the row (lease, head, cancel request and inline message cleared),
--      tagged if that message is due, timed until it is otherwise; return true.
CREATE OR REPLACE FUNCTION "harel".harel_move_on(p_group TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_next RECORD;
    v_row  RECORD;
    v_tags BIGINT[];
    -- (the tag in a scalar variable: an UPDATE that sets a column from a subscripted PL/pgSQL
    -- array crashed the Citus coordinator, signal 11)
    v_tag  BIGINT;
BEGIN
    SELECT n.seq, n.not_before INTO v_next
      FROM "harel".transport_messages n
     WHERE n.group_id = p_group
     ORDER BY n.seq
     LIMIT 1;
    IF v_next.seq IS NULL THEN
        PERFORM "harel".harel_drop_empty_groups(ARRAY[p_group], 200);
        RETURN false;
    END IF;
    IF v_next.not_before IS NULL OR v_next.not_before <= statement_timestamp() THEN
        SELECT t.queue_id, t.priority, t.fair_key INTO v_row
          FROM "harel".transport_groups t WHERE t.group_id = p_group;
        v_tags := "harel".harel_fair_tags(ARRAY[v_row.queue_id], ARRAY[v_row.priority],
                                           ARRAY[v_row.fair_key]);
    END IF;
    v_tag := v_tags[1];
    UPDATE "harel".transport_groups t
       SET locked_by = NULL, head_seq = NULL, head_attempts = 0, head_started_at = NULL,
           available_at = GREATEST(statement_timestamp(), v_next.not_before),
           fair_tag = v_tag,
           cancel_requested_at = NULL, cancel_reason = NULL, cancel_keep_ms = NULL,
           inline_seq = NULL, inline_kind = NULL, inline_payload = NULL,
           inline_enqueued_at = NULL, inline_not_before = NULL,
           inline_last_error = NULL, inline_unique_key = NULL, inline_trace_context = NULL
     WHERE t.group_id = p_group;
    RETURN true;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_move_on(TEXT) FROM PUBLIC;
