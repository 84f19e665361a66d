-- harel_extend: the heartbeat: extends a batch of leases in one round trip. A worker's
-- entry point.
--
-- Takes:
--   p_groups, p_seqs, p_tokens  the leases: group, head message, token
--   p_lease_ms  the new lease end, from statement_timestamp() on the database's clock,
--               1 ms to 24 h
-- Returns one row per input, in input order:
--   seq               the lease's message
--   extended          the lease is still held (false: it was lost)
--   cancel_requested  a cancel of the job was asked for (harel_cancel): its worker signals
--                     the handler, and the settle of the lease ends the job as cancelled
-- Fence: a lease is extended only while its group is leased to that token at that message.
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on each held row, in group order; it never waits. A
--   row another transaction has locked (mostly the worker's own completer settling that
--   job) is not extended this time and is reported held if the row says so: the next beat,
--   a third of a lease later, extends it. A heartbeat that waited here could close a cycle
--   with harel_settle's fast path (sql/README.md, "Row locks").
-- Indexes: transport_groups' key, one lookup per input; rows written by the TID it found.
-- Errors: 22023 for arrays of different lengths or p_lease_ms out of range.
--
-- Steps:
--   1. Check the arguments.
--   2. Lock, in group order, each row still leased to its input, skipping locked rows.
--   3. Move the locked rows' available_at to the new lease end.
--   4. Report each input by one lookup by key: held or not, cancel asked for or not.
CREATE OR REPLACE FUNCTION @schema@.harel_extend(
    p_groups   TEXT[],
    p_seqs     BIGINT[],
    p_tokens   UUID[],
    p_lease_ms BIGINT
) RETURNS TABLE (seq BIGINT, extended BOOLEAN, cancel_requested BOOLEAN)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_expiry TIMESTAMPTZ := statement_timestamp() + p_lease_ms * interval '1 millisecond';
    v_locked TEXT[];
BEGIN
    IF p_lease_ms NOT BETWEEN 1 AND 86400000
       OR cardinality(p_seqs) IS DISTINCT FROM cardinality(p_groups)
       OR cardinality(p_tokens) IS DISTINCT FROM cardinality(p_groups) THEN
        RAISE EXCEPTION 'harel_extend: need one group, seq and token per lease and p_lease_ms in 1..86400000'
            USING ERRCODE = '22023';
    END IF;

    -- lock the held rows that nobody else has locked, in group order: one lookup by key
    -- and one lock per input, in the order of the inputs sorted here (a subquery with a
    -- lock is never flattened or reordered; see harel_settle's fence)
    SELECT array_agg(k.group_id) INTO v_locked
      FROM (SELECT * FROM unnest(p_groups, p_seqs, p_tokens) AS x(group_id, seq, token)
             ORDER BY x.group_id
            OFFSET 0) AS x
     CROSS JOIN LATERAL (SELECT g.group_id FROM @schema@.transport_groups g
                          WHERE g.group_id = x.group_id AND g.locked_by = x.token
                            AND g.head_seq = x.seq
                            FOR NO KEY UPDATE SKIP LOCKED) AS k;

    -- the locked rows are the held ones (checked under the lock, which keeps them so): each
    -- by its key, then by the TID of the version that lookup found (locked by us)
    UPDATE @schema@.transport_groups g
       SET available_at = v_expiry,
           -- a lapsed lease a claim promoted but did not lease yet goes back to its holder
           fair_tag = NULL
      FROM unnest(v_locked) AS l(group_id)
     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.transport_groups t
                          WHERE t.group_id = l.group_id
                         OFFSET 0) AS k
     WHERE g.ctid = k.row_ctid;

    -- Every lease, extended or skipped, is reported held when its row says so (a skipped
    -- row as this statement's snapshot sees it). One lookup by key per input: a correlated
    -- subquery, which the planner cannot turn into a walk of the index joined to the input
    -- (as it may a lateral join), so the cost grows with the leases, not with their square
    -- (a filter of the input against the locked rows, `<> ALL`, would). `cancel` is NULL
    -- when the lease is not held.
    RETURN QUERY
    SELECT l.seq, l.cancel IS NOT NULL, COALESCE(l.cancel, false)
      FROM (SELECT x.seq, x.ord,
                   (SELECT g.cancel_requested_at IS NOT NULL
                      FROM @schema@.transport_groups g
                     WHERE g.group_id = x.group_id AND g.locked_by = x.token
                       AND g.head_seq = x.seq) AS cancel
              FROM unnest(p_groups, p_seqs, p_tokens) WITH ORDINALITY
                   AS x(group_id, seq, token, ord)
            OFFSET 0) AS l -- evaluated once per input, not once per use of `cancel`
     ORDER BY l.ord;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_extend(TEXT[], BIGINT[], UUID[], BIGINT) FROM PUBLIC;
