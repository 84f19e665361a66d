-- harel_ensure_queue: the id of a named queue, created if it does not exist (migration 0007).
-- Internal: called by harel_publish (the first job into a queue creates it) and
-- harel_set_queue, never by a role.
--
-- A name is 1 to 64 characters of letters, digits, '_', '-', '.' and ':'; there are at most
-- 1,000 queues (each has claim floors and a rate sequence of its own, so a producer cannot
-- make the schema grow without bound). Creating a queue writes its row and sequences in the
-- caller's transaction: a concurrent creation of the same name waits for it, and a rollback
-- takes the queue back, its id included. A new queue takes the lowest id (1 to 1,000) that
-- no queue has (migration 0011: ids drawn from a sequence were used up by rollbacks, so
-- the cap counted creations, not queues). Two transactions creating different queues at
-- once may pick the same id: the second waits for the first and takes the next free one
-- if the first commits. Existing queues are only read (no lock, no write).
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
