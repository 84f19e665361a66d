-- harel_ensure_queue: the id of a named queue, created if it does not exist. Internal:
-- called by harel_publish (the first job into a queue creates it) and harel_set_queue.
--
-- Takes:
--   p_name  the queue's name: 1 to 64 letters, digits, '_', '-', '.' or ':'
-- Returns: the queue's id (0 is 'default'; named queues 1 to 1,000).
-- Fence: an existing queue is only read (no lock, no write). At most 1,000 named queues,
--   counting the queues that exist: each has claim floors, a rate sequence and fair share's
--   sequences of its own,
--   so a producer cannot make the schema grow without bound.
-- Locks: a creation writes the queue's row and sequences in the caller's transaction: a
--   concurrent creation of the same name, or of another name that picked the same id,
--   waits for it; a rollback takes the queue back, its id included.
-- Indexes: queues' key (id) and its unique name.
-- Errors: 22023 for a name not of that form; 54000 when 1,000 named queues exist; 40001 if
--   concurrent creations kept taking the ids it tried (retry the transaction).
--
-- Steps:
--   1. Found by name: return its id.
--   2. Check the name.
--   3. The lowest id above the last one tried that no queue has (none: 54000).
--   4. Insert the queue with it, ON CONFLICT DO NOTHING (waits for an uncommitted creation
--      of that name or id). Inserted: create its sequences claim_floor_q<id>_0 to _4 and
--      queue_rate_q<id>, and return the id.
--   5. Not inserted: the name committed meanwhile (return its id), or another name took the
--      id (back to 3).
CREATE OR REPLACE FUNCTION @schema@.harel_ensure_queue(p_name TEXT) RETURNS SMALLINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_id   SMALLINT;
    v_free SMALLINT;
    v_fair TEXT;
BEGIN
    SELECT q.id INTO v_id FROM @schema@.queues q WHERE q.name = p_name;
    IF FOUND THEN
        RETURN v_id;
    END IF;
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'harel_ensure_queue: queue names are 1 to 64 letters, digits, _ - . or :'
            USING ERRCODE = '22023';
    END IF;
    v_free := 0::smallint;
    -- (bounded: each round either creates the queue, finds it, or moves past an id that a
    -- concurrent creation committed)
    FOR i IN 1..1001 LOOP
        -- the lowest id above the last one tried that no queue has (the queues table holds
        -- at most 1,001 rows: an anti-join of two small sets)
        SELECT min(c.id)::smallint INTO v_free
          FROM generate_series(v_free + 1, 1000) AS c(id)
         WHERE NOT EXISTS (SELECT 1 FROM @schema@.queues q WHERE q.id = c.id);
        IF v_free IS NULL THEN
            RAISE EXCEPTION 'harel_ensure_queue: a schema has at most 1,000 named queues'
                USING ERRCODE = '54000';
        END IF;
        -- on a conflict on the name or on the id with a creation not yet committed, this
        -- waits for it; then it inserts (that one rolled back) or does nothing
        INSERT INTO @schema@.queues (id, name)
        VALUES (v_free, p_name)
        ON CONFLICT DO NOTHING
        RETURNING id INTO v_id;
        IF FOUND THEN
            FOR l IN 0..4 LOOP
                EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                               'claim_floor_q' || v_id || '_' || l);
            END LOOP;
            EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                           'queue_rate_q' || v_id);
            -- fair share's state (migration 0013)
            FOREACH v_fair IN ARRAY ARRAY['fair_v_q', 'fair_floor_q', 'fair_mark_q',
                                          'fair_step_q'] LOOP
                EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                               v_fair || v_id);
            END LOOP;
            RETURN v_id;
        END IF;
        SELECT q.id INTO v_id FROM @schema@.queues q WHERE q.name = p_name;
        IF FOUND THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'harel_ensure_queue: the queue could not be created (concurrent changes)'
        USING ERRCODE = '40001';
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_ensure_queue(TEXT) FROM PUBLIC;
