-- harel_set_fair_weight: sets a fairness key's weight in a queue, creating the queue if
-- asked to and nothing was published into it yet. An operator's entry point.
--
-- Takes:
--   p_queue   the queue's name (harel_ensure_queue's rule)
--   p_key     the fairness key, 0 to 255 bytes ('' is the key of jobs without one)
--   p_weight  1 to 1,000: the key's share of the starts against the other keys' weights
--             (1, every key's weight unless set, removes the key's row)
--   p_create  create the queue if it does not exist (default true); false refuses an
--             unknown name
-- Returns: nothing.
-- Fence: at most 100,000 weighted keys per schema (the table is read at every tag, by key:
--   the bound keeps an operator's script from growing it without end). A change applies to
--   the tags drawn after it commits: groups already tagged keep their places.
-- Locks: the key's row in fair_keys; harel_ensure_queue's when it creates the queue.
-- Indexes: fair_keys' key (queue_id, key).
-- Errors: 22023 for a key or weight out of range; 54000 past 100,000 weighted keys;
--   harel_queue_id's (P0002: an unknown name, not to be created).
--
-- Steps:
--   1. Check the key and the weight.
--   2. The queue's id (harel_queue_id).
--   3. Weight 1: delete the key's row; otherwise insert or update it (the bound checked
--      for a new row).
CREATE OR REPLACE FUNCTION @schema@.harel_set_fair_weight(
    p_queue  TEXT,
    p_key    TEXT,
    p_weight INT,
    p_create BOOLEAN DEFAULT true
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    c_max_keys CONSTANT INT := 100000;
    v_queue    SMALLINT;
    -- (the time in a variable: Citus takes a function in an upsert's DO UPDATE SET, or a
    -- modification's CASE, only if it is immutable; a parameter it takes)
    v_now    TIMESTAMPTZ := statement_timestamp();
BEGIN
    IF p_key IS NULL OR octet_length(p_key) > 255 OR p_weight IS NULL
       OR p_weight NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'harel_set_fair_weight: need a key of at most 255 bytes and a weight of 1 to 1000'
            USING ERRCODE = '22023';
    END IF;
    v_queue := @schema@.harel_queue_id(p_queue, p_create);
    IF p_weight = 1 THEN
        DELETE FROM @schema@.fair_keys k WHERE k.queue_id = v_queue AND k.key = p_key;
        RETURN;
    END IF;
    UPDATE @schema@.fair_keys k
       SET weight = p_weight, updated_at = v_now
     WHERE k.queue_id = v_queue AND k.key = p_key;
    IF FOUND THEN
        RETURN;
    END IF;
    IF (SELECT count(*) FROM (SELECT 1 FROM @schema@.fair_keys LIMIT c_max_keys) AS x)
       >= c_max_keys THEN
        RAISE EXCEPTION 'harel_set_fair_weight: a schema has at most 100,000 weighted keys'
            USING ERRCODE = '54000';
    END IF;
    INSERT INTO @schema@.fair_keys (queue_id, key, weight)
    VALUES (v_queue, p_key, p_weight)
    ON CONFLICT (queue_id, key) DO UPDATE
       SET weight = excluded.weight, updated_at = v_now;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_set_fair_weight(TEXT, TEXT, INT, BOOLEAN) FROM PUBLIC;
