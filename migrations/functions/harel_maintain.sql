-- harel_maintain: housekeeping that a worker may run (its maintenance task calls it every
-- minute or so; any number of workers may, concurrently). Bounded work per call.
--
-- Prunes settle receipts older than an hour: each worker deletes its previous receipt with
-- every batch, so only the last receipt of a worker that stopped stays behind. Returns how
-- many rows it removed.
CREATE OR REPLACE FUNCTION "harel".harel_maintain() RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_pruned BIGINT;
BEGIN
    WITH pruned AS (
        DELETE FROM "harel".settle_receipts r
         WHERE r.receipt IN (SELECT o.receipt FROM "harel".settle_receipts o
                              WHERE o.created_at < statement_timestamp() - interval '1 hour'
                              LIMIT 10000)
        RETURNING 1
    )
    SELECT count(*) INTO v_pruned FROM pruned;
    RETURN v_pruned;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_maintain() FROM PUBLIC;
