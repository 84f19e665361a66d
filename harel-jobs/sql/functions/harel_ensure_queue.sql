-- harel_ensure_queue: the id of a named queue, created if it does not exist (migration 0007).
-- Internal: called by harel_publish (the first job into a queue creates it) and
-- harel_set_queue, never by a role.
--
-- A name is 1 to 64 characters of letters, digits, '_', '-', '.' and ':'; there are at most
-- 1,000 queues (each has claim floors and a rate sequence of its own, so a producer cannot
-- make the schema grow without bound). Creating a queue writes its row and sequences in the
-- caller's transaction: a concurrent creation of the same name waits for it, and a rollback
-- takes the queue back. Existing queues are only read (no lock, no write).
CREATE OR REPLACE FUNCTION @schema@.harel_ensure_queue(p_name TEXT) RETURNS SMALLINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_id SMALLINT;
BEGIN
    SELECT q.id INTO v_id FROM @schema@.queues q WHERE q.name = p_name;
    IF FOUND THEN
        RETURN v_id;
    END IF;
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'harel_ensure_queue: queue names are 1 to 64 letters, digits, _ - . or :'
            USING ERRCODE = '22023';
    END IF;
    -- (twice at most: a concurrent creation of the name that rolled back leaves it free)
    FOR i IN 1..3 LOOP
        -- the id is drawn only once the name is known to be new (a sequence is not rolled
        -- back: drawing it for every duplicate would use the 1,000 ids up)
        INSERT INTO @schema@.queues (id, name)
        SELECT nextval('@schema@.queue_ids'), p_name
         WHERE NOT EXISTS (SELECT 1 FROM @schema@.queues q WHERE q.name = p_name)
        ON CONFLICT (name) DO NOTHING
        RETURNING id INTO v_id;
        IF FOUND THEN
            FOR l IN 0..4 LOOP
                EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                               'claim_floor_q' || v_id || '_' || l);
            END LOOP;
            EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                           'queue_rate_q' || v_id);
            RETURN v_id;
        END IF;
        SELECT q.id INTO v_id FROM @schema@.queues q WHERE q.name = p_name;
        IF FOUND THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'harel_ensure_queue: the queue could not be created (concurrent changes)'
        USING ERRCODE = '40001';
EXCEPTION
    WHEN sequence_generator_limit_exceeded THEN
        RAISE EXCEPTION 'harel_ensure_queue: a schema has at most 1,000 named queues'
            USING ERRCODE = '54000';
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_ensure_queue(TEXT) FROM PUBLIC;
