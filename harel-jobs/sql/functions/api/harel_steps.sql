-- harel_steps: the durable steps a leased job has recorded, for its lease holder
-- (`JobContext::step` reads them once per attempt, at its first call). A worker's entry
-- point.
--
-- Takes:
--   p_group, p_seq, p_token  the lease: group, head message (the job's id), token
-- Returns one row:
--   held     the lease is held (false: nothing else is returned)
--   names    the steps' names, in name order (NULL: none recorded)
--   results  their results as JSON text, in the same order
-- Fence: the steps are returned only while the group is leased to that token at that
--   message, so a worker role reads the results of the jobs it holds and of no other. It
--   is a read: the lease may be lost the moment after, and a holder that lost it can then
--   record nothing (harel_record_step is fenced again).
-- Locks: none.
-- Indexes: transport_groups' key; job_steps' key (one range).
-- Errors: 22023 for a NULL argument.
--
-- Steps:
--   1. Check the arguments.
--   2. Whether the lease is held; if not, (false, NULL, NULL).
--   3. The job's steps, in name order.
CREATE OR REPLACE FUNCTION @schema@.harel_steps(
    p_group TEXT,
    p_seq   BIGINT,
    p_token UUID
) RETURNS TABLE (held BOOLEAN, names TEXT[], results TEXT[])
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_group IS NULL OR p_seq IS NULL OR p_token IS NULL THEN
        RAISE EXCEPTION 'harel_steps: need a group, a seq and a token'
            USING ERRCODE = '22023';
    END IF;

    PERFORM 1 FROM @schema@.transport_groups g
      WHERE g.group_id = p_group AND g.locked_by = p_token AND g.head_seq = p_seq;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::text[], NULL::text[];
        RETURN;
    END IF;

    RETURN QUERY
    SELECT true, array_agg(s.name ORDER BY s.name), array_agg(s.result::text ORDER BY s.name)
      FROM @schema@.job_steps s
     WHERE s.job_id = p_seq;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_steps(TEXT, BIGINT, UUID) FROM PUBLIC;
