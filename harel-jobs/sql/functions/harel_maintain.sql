-- harel_maintain: housekeeping that a worker runs (its maintenance task calls it about once a
-- second, less often when it is slow). Any number of workers may call it: one does the
-- work at a time, the others return at once.
--
-- The sweep: a group below its level's claim floor (migration 0003) that is claimable is a
-- straggler: its transaction committed well after it wrote (a long application transaction
-- around an enqueue whose NOTIFY did not reach a worker, or a worker function that took
-- longer than the floor's margin to commit). For each level, the oldest such group lowers
-- the floor to it, so that the next claim finds it. This scan reads every dead entry below
-- the floor: cheap while vacuum keeps up, slower under an old snapshot, which is why the
-- worker spaces its calls out by how long they take.
--
-- It also prunes settle receipts older than an hour (each worker deletes its previous
-- receipt with every batch, so only the last receipt of a worker that stopped stays behind),
-- finished jobs in job_history past their keep_until, unique keys whose hold is over, and
-- worker reports older than a day: each at most 10,000 rows a call, oldest first, by index.
CREATE OR REPLACE FUNCTION @schema@.harel_maintain()
RETURNS TABLE (floors_lowered INT, receipts_pruned BIGINT, history_pruned BIGINT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_floor     BIGINT;
    v_floor_name TEXT;
    q           RECORD;
    v_straggler TIMESTAMPTZ;
    v_lowered   INT := 0;
    v_pruned    BIGINT;
    v_history   BIGINT;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('harel-jobs maintain @schema@', 0)) THEN
        RETURN QUERY SELECT 0, 0::bigint, 0::bigint;
        RETURN;
    END IF;

    -- every queue's floors (queue 0's sequences are claim_floor_<level>, see migration 0007)
    FOR q IN SELECT qs.id FROM @schema@.queues qs ORDER BY qs.id LOOP
        v_floor_name := CASE WHEN q.id = 0 THEN '@schema@.claim_floor_'
                             ELSE '@schema@.claim_floor_q' || q.id || '_' END;
        FOR l IN 0..4 LOOP
            v_floor := COALESCE(pg_sequence_last_value((v_floor_name || l)::regclass), 0);
            v_straggler := NULL;
            -- below the floor, so in the past: claimable, whether free, parked or lease lapsed
            SELECT g.available_at INTO v_straggler
              FROM @schema@.transport_groups g
             WHERE g.queue_id = q.id AND g.priority = l
               AND g.available_at < timestamptz 'epoch' + v_floor * interval '1 microsecond'
             ORDER BY g.available_at
             LIMIT 1;
            IF v_straggler IS NOT NULL THEN
                PERFORM setval((v_floor_name || l)::regclass,
                               GREATEST((extract(epoch FROM v_straggler) * 1000000)::bigint - 1000, 0));
                v_lowered := v_lowered + 1;
            END IF;
        END LOOP;
    END LOOP;

    WITH pruned AS (
        DELETE FROM @schema@.settle_receipts r
         WHERE r.receipt IN (SELECT o.receipt FROM @schema@.settle_receipts o
                              WHERE o.created_at < statement_timestamp() - interval '1 hour'
                              LIMIT 10000)
        RETURNING 1
    )
    SELECT count(*) INTO v_pruned FROM pruned;

    WITH pruned AS (
        DELETE FROM @schema@.job_history h
         -- = ANY (ARRAY(…)): rows looked up by key (see sql/README.md)
         WHERE h.id = ANY (ARRAY(SELECT o.id FROM @schema@.job_history o
                                  WHERE o.keep_until < statement_timestamp()
                                  ORDER BY o.keep_until
                                  LIMIT 10000))
        RETURNING 1
    )
    SELECT count(*) INTO v_history FROM pruned;

    DELETE FROM @schema@.unique_keys u
     WHERE u.key = ANY (ARRAY(SELECT o.key FROM @schema@.unique_keys o
                               WHERE o.held_until < statement_timestamp()
                               ORDER BY o.held_until
                               LIMIT 10000));

    -- worker reports older than a day (migration 0008)
    DELETE FROM @schema@.throughput t
     WHERE (t.minute, t.worker) IN (SELECT o.minute, o.worker FROM @schema@.throughput o
                                     WHERE o.minute < statement_timestamp() - interval '1 day'
                                     ORDER BY o.minute
                                     LIMIT 10000);
    DELETE FROM @schema@.workers w
     WHERE w.id = ANY (ARRAY(SELECT o.id FROM @schema@.workers o
                              WHERE o.seen_at < statement_timestamp() - interval '1 day'
                              ORDER BY o.seen_at
                              LIMIT 1000));

    RETURN QUERY SELECT v_lowered, v_pruned, v_history;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_maintain() FROM PUBLIC;
