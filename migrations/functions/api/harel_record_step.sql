-- harel_record_step: records the result of one durable step of a leased job
-- (`JobContext::step`). A worker's entry point.
--
-- Takes:
--   p_group, p_seq, p_token  the lease: group, head message (the job's id), token
--   p_name    the step's name, 1 to 255 bytes
--   p_result  its result as JSON text, at most 1 MiB (1,048,576 bytes)
-- Returns one row:
--   outcome  'recorded': stored now; 'exists': a result under this name was recorded
--            before (the first one stays: recording is once per name), returned in
--            `result`; 'lost': the lease is not held, nothing stored; 'full': the job
--            already holds 1,000 steps, or this result would take its steps over 8 MiB
--            (8,388,608 bytes) in all, nothing stored
--   result   the recorded result for 'exists'; NULL otherwise
-- Fence: stored only while the group is leased to that token at that message (as
--   harel_settle and harel_extend fence): a lease that lapsed and was claimed again, or
--   whose job was settled, stores nothing and reads 'lost'.
-- Locks: FOR NO KEY UPDATE of the one group row, waiting for it (a settle or cancel of that
--   group in flight); it holds no other row lock while it waits, so it closes no cycle
--   (sql/README.md, "Row locks"). Records of one lease are so taken one at a time, which
--   keeps the limits per job exact.
-- Indexes: transport_groups' key; job_steps' key (the job's steps are one range of it).
-- Errors: 22023 for a name or result out of bounds (nothing stored); 22P02 for a result
--   that is not JSON.
--
-- Steps:
--   1. Check the arguments.
--   2. Lock the group row if it is still leased to the token at the message; else 'lost'.
--   3. A step of that name already recorded: 'exists', with its result.
--   4. Over the job's limits with this one: 'full'.
--   5. Insert the step: 'recorded'.
CREATE OR REPLACE FUNCTION "harel".harel_record_step(
    p_group  TEXT,
    p_seq    BIGINT,
    p_token  UUID,
    p_name   TEXT,
    p_result TEXT
) RETURNS TABLE (outcome TEXT, result TEXT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_bytes  INT;
    v_count  BIGINT;
    v_total  BIGINT;
    v_stored TEXT;
    c_max_result CONSTANT INT := 1048576;
    c_max_steps  CONSTANT INT := 1000;
    c_max_total  CONSTANT INT := 8388608;
BEGIN
    v_bytes := octet_length(p_result);
    IF p_group IS NULL OR p_seq IS NULL OR p_token IS NULL
       OR octet_length(p_name) IS NULL OR octet_length(p_name) NOT BETWEEN 1 AND 255
       OR v_bytes IS NULL OR v_bytes > c_max_result THEN
        RAISE EXCEPTION 'harel_record_step: need a lease, a name of 1 to 255 bytes and a result of at most 1 MiB'
            USING ERRCODE = '22023';
    END IF;

    -- the fence, under the row's lock until the insert commits: a settle or a claim of the
    -- group waits for it, so a step is never stored for a lease that has ended
    PERFORM 1 FROM "harel".transport_groups g
      WHERE g.group_id = p_group AND g.locked_by = p_token AND g.head_seq = p_seq
        FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'lost'::text, NULL::text;
        RETURN;
    END IF;

    SELECT s.result::text INTO v_stored FROM "harel".job_steps s
     WHERE s.job_id = p_seq AND s.name = p_name;
    IF FOUND THEN
        RETURN QUERY SELECT 'exists'::text, v_stored;
        RETURN;
    END IF;

    SELECT count(*), COALESCE(sum(s.bytes), 0) INTO v_count, v_total
      FROM "harel".job_steps s
     WHERE s.job_id = p_seq;
    IF v_count >= c_max_steps OR v_total + v_bytes > c_max_total THEN
        RETURN QUERY SELECT 'full'::text, NULL::text;
        RETURN;
    END IF;

    INSERT INTO "harel".job_steps (job_id, name, result, bytes, recorded_at)
    VALUES (p_seq, p_name, p_result::json, v_bytes, statement_timestamp());
    RETURN QUERY SELECT 'recorded'::text, NULL::text;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_record_step(TEXT, BIGINT, UUID, TEXT, TEXT) FROM PUBLIC;
