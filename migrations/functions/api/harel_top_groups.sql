-- harel_top_groups: the groups an operator looks for first, ranked: the top p_limit, one
-- snapshot, not a page. An operator's entry point.
--
-- Takes:
--   p_rank   'waiting': the ready groups that have waited longest (since their
--            available_at), whichever queue or level, among the due timed groups and
--            the 1,000 ready groups next to start per queue and level (fair share may
--            keep a light key's group waiting longer, further on); 'size': the largest
--            groups
--   p_limit  1 to 100
-- Returns harel_list_groups' columns for each group (the one place that says a group's
--   status and counts), ranked, and:
--   jobs_estimate  ('size') the statistics' figure: the group's frequency in the sample
--                  times the table's estimated rows, plus its first job (in its group row)
--   stats_at       ('size') when the statistics were gathered
-- Fence: bounded. 'waiting' reads at most p_limit + 1,000 claim index entries per queue
--   and level.
--   'size' does not count every job: its candidates are the most common values of
--   transport_messages.group_id in PostgreSQL's statistics (ANALYZE's sample), 2 × p_limit
--   of them, each then looked up and counted as harel_list_groups does. Groups drained
--   since the sample are left out; when no group stands out in it, there are none.
--   STABLE.
-- Locks: none.
-- Indexes: transport_groups_timed and transport_groups_ready ('waiting'); pg_stats and
--   pg_stat_all_tables ('size'); harel_list_groups' for each group.
-- Errors: 22023 for a limit out of range or an unknown rank.
--
-- Steps:
--   1. Check the arguments.
--   2. Rank the candidates: per queue and level the oldest ready entries ('waiting'), or
--      the statistics' most common groups ('size').
--   3. Each candidate through harel_list_groups; order, and cut at p_limit.
CREATE OR REPLACE FUNCTION "harel".harel_top_groups(
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
DECLARE
    v_groups    TEXT[];
    v_available TIMESTAMPTZ[];
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'harel_top_groups: need a limit of 1 to 100' USING ERRCODE = '22023';
    END IF;

    IF p_rank = 'waiting' THEN
        -- (the ranking first, harel_list_groups then from a statement that reads no table:
        -- on Citus a statement that reads the schema's tables runs whole on the worker node,
        -- where harel_list_groups's own queries cannot run)
        SELECT array_agg(r.group_id ORDER BY r.available_at, r.group_id),
               array_agg(r.available_at ORDER BY r.available_at, r.group_id)
          INTO v_groups, v_available
          FROM (
            SELECT w.group_id, w.available_at
              FROM "harel".queues q
             CROSS JOIN generate_series(0, 4) AS l(level)
             CROSS JOIN LATERAL (
                    -- the due timed groups, and the ready groups next to start (fair share
                    -- orders these: a light key's group further on is not among them)
                    (SELECT g.group_id, g.available_at FROM "harel".transport_groups g
                      WHERE g.queue_id = q.id AND g.priority = l.level
                        AND g.fair_tag IS NULL
                        AND g.available_at <= statement_timestamp()
                      ORDER BY g.available_at
                      LIMIT p_limit)
                    UNION ALL
                    (SELECT g.group_id, g.available_at FROM "harel".transport_groups g
                      WHERE g.queue_id = q.id AND g.priority = l.level
                        AND g.fair_tag IS NOT NULL
                      ORDER BY g.fair_tag
                      LIMIT 1000)) AS w
             ORDER BY w.available_at, w.group_id
             LIMIT p_limit) AS r;
        RETURN QUERY
        SELECT i.*, NULL::bigint, NULL::timestamptz
          FROM unnest(v_groups, v_available) WITH ORDINALITY AS r(group_id, available_at, ord)
         CROSS JOIN LATERAL "harel".harel_list_groups(r.group_id, NULL, NULL) AS i
         ORDER BY r.ord;
    ELSIF p_rank = 'size' THEN
        RETURN QUERY
        WITH tbl AS MATERIALIZED (
            SELECT c.oid, n.nspname, c.relname, greatest(c.reltuples, 0) AS reltuples
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = '"harel".transport_messages'::regclass
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
         CROSS JOIN LATERAL "harel".harel_list_groups(c.group_id, NULL, NULL) AS i
         ORDER BY i.jobs DESC, c.estimate DESC, i.group_id
         LIMIT p_limit;
    ELSE
        RAISE EXCEPTION 'harel_top_groups: rank by ''waiting'' or ''size'''
            USING ERRCODE = '22023';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_top_groups(TEXT, INT) FROM PUBLIC;
