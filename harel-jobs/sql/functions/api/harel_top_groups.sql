-- harel_top_groups: the groups an operator looks for first, ranked, each as
-- harel_list_groups reports it (the one place that says a group's status and counts), with
-- `jobs_estimate`. Not a page: the top p_limit (1..100), one snapshot.
--
-- p_rank 'waiting': the ready groups that have waited longest (since their available_at),
-- oldest first, whichever queue or priority level they are in. Read in the claim index's
-- order: at most p_limit entries per queue and level.
--
-- p_rank 'size': the largest groups. An exact ranking would count every job of the queue,
-- so the candidates come from PostgreSQL's statistics of transport_messages.group_id (the
-- most common values that ANALYZE, or autovacuum's analyze, found in its sample), in the
-- order of their estimated size; each is then looked up (and counted up to 1,000) like
-- harel_list_groups does. `jobs_estimate` is the statistics' figure (frequency times the
-- table's estimated rows, plus the group's first job, which is stored in its group row);
-- `stats_at` is when they were gathered. Groups that drained since are left out; when no
-- group stands out in the sample (the groups are all about as large), there is none.
CREATE OR REPLACE FUNCTION @schema@.harel_top_groups(
    p_rank  TEXT,
    p_limit INT
)
RETURNS TABLE (
    group_id         TEXT,
    status           TEXT,
    priority         SMALLINT,
    available_at     TIMESTAMPTZ,
    head_id          BIGINT,
    head_attempts    INT,
    jobs             INT,
    jobs_capped      BOOLEAN,
    cancel_requested BOOLEAN,
    queue            TEXT,
    jobs_estimate    BIGINT,
    stats_at         TIMESTAMPTZ
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'harel_top_groups: need a limit of 1 to 100' USING ERRCODE = '22023';
    END IF;

    IF p_rank = 'waiting' THEN
        RETURN QUERY
        WITH ranked AS MATERIALIZED (
            SELECT w.group_id, w.available_at
              FROM @schema@.queues q
             CROSS JOIN generate_series(0, 4) AS l(level)
             CROSS JOIN LATERAL (
                    SELECT g.group_id, g.available_at FROM @schema@.transport_groups g
                     WHERE g.queue_id = q.id AND g.priority = l.level
                       AND g.available_at <= statement_timestamp()
                     ORDER BY g.available_at
                     LIMIT p_limit) AS w
             ORDER BY w.available_at, w.group_id
             LIMIT p_limit
        )
        SELECT i.*, NULL::bigint, NULL::timestamptz
          FROM ranked r
         CROSS JOIN LATERAL @schema@.harel_list_groups(r.group_id, NULL, NULL) AS i
         ORDER BY r.available_at, r.group_id;
    ELSIF p_rank = 'size' THEN
        RETURN QUERY
        WITH tbl AS MATERIALIZED (
            SELECT c.oid, n.nspname, c.relname, greatest(c.reltuples, 0) AS reltuples
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = '@schema@.transport_messages'::regclass
        ),
        candidates AS MATERIALIZED (
            SELECT v.group_id, round(v.freq * tbl.reltuples)::bigint + 1 AS estimate
              FROM tbl
              JOIN pg_stats st ON st.schemaname = tbl.nspname AND st.tablename = tbl.relname
                              AND st.attname = 'group_id'
             CROSS JOIN LATERAL unnest(st.most_common_vals::text::text[],
                                       st.most_common_freqs) AS v(group_id, freq)
             ORDER BY v.freq DESC, v.group_id
             LIMIT 2 * p_limit
        ),
        gathered AS MATERIALIZED (
            SELECT greatest(s.last_analyze, s.last_autoanalyze) AS at
              FROM tbl JOIN pg_stat_all_tables s ON s.relid = tbl.oid
        )
        SELECT i.*, c.estimate, (SELECT at FROM gathered)
          FROM candidates c
         CROSS JOIN LATERAL @schema@.harel_list_groups(c.group_id, NULL, NULL) AS i
         ORDER BY i.jobs DESC, c.estimate DESC, i.group_id
         LIMIT p_limit;
    ELSE
        RAISE EXCEPTION 'harel_top_groups: rank by ''waiting'' or ''size'''
            USING ERRCODE = '22023';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_top_groups(TEXT, INT) FROM PUBLIC;
