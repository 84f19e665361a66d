-- harel_list_groups: the groups that hold jobs, a page in group id order with keyset
-- pagination (no OFFSET), or one group. An operator's entry point: which groups are
-- leased, parked or waiting, and how many jobs each holds.
--
-- Takes:
--   p_group  one group's id: its row or none (p_after and p_limit are then ignored); NULL
--            for a page
--   p_after  the groups whose id sorts after it (NULL: from the first)
--   p_limit  1 to 1,000
-- Returns one row per group, in id order:
--   group_id, priority, available_at
--   status            'leased' (a worker holds a live lease), 'parked' (not claimable
--                     before available_at: a retry's backoff, a snooze, a delayed first
--                     job) or 'waiting' (claimable now)
--   head_id, head_attempts  its first job (the one a lease is about), with the attempts
--                     counted for it
--   jobs, jobs_capped  its jobs, counted up to 1,000 (jobs_capped: at least that many)
--   cancel_requested  its running job's cancel was asked for
--   queue             the named queue its jobs belong to
-- Fence: bounded: a call reads at most p_limit group rows and p_limit × 1,000 index
--   entries, whatever the queue holds. STABLE: the page is one snapshot.
-- Locks: none.
-- Indexes: transport_groups' key (one branch per use, each with its own index condition);
--   transport_messages' key (group_id, seq) for each group's first job and count; queues'
--   key.
-- Errors: 22023 for a page's limit out of range.
--
-- Steps:
--   1. Check the limit.
--   2. The group by its key, or the page by the key from p_after.
--   3. Per group: its status, first job, capped count and queue's name.
CREATE OR REPLACE FUNCTION @schema@.harel_list_groups(
    p_group TEXT,
    p_after TEXT,
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
    queue            TEXT
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
    v_now  TIMESTAMPTZ := clock_timestamp();
    c_cap  CONSTANT INT := 1000;
BEGIN
    IF p_group IS NULL AND (p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000) THEN
        RAISE EXCEPTION 'harel_list_groups: need a limit of 1 to 1000'
            USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    -- one branch per use, each with its own index condition: one OR'd condition made the
    -- generic plan walk the key in order to find one group (66,667 rows filtered out for
    -- customer-7 of 100,000); a branch whose guard is false is not run
    WITH g AS MATERIALIZED (
        SELECT t.group_id, t.priority, t.available_at, t.locked_by, t.head_seq,
               t.head_attempts, t.inline_seq, t.cancel_requested_at, t.queue_id
          FROM @schema@.transport_groups t
         WHERE p_group IS NOT NULL AND t.group_id = p_group
        UNION ALL
        (SELECT t.group_id, t.priority, t.available_at, t.locked_by, t.head_seq,
                t.head_attempts, t.inline_seq, t.cancel_requested_at, t.queue_id
           FROM @schema@.transport_groups t
          WHERE p_group IS NULL AND t.group_id > COALESCE(p_after, '')
          ORDER BY t.group_id
          LIMIT p_limit)
    )
    SELECT g.group_id,
           CASE WHEN g.locked_by IS NOT NULL AND g.available_at > v_now THEN 'leased'
                WHEN g.available_at > v_now THEN 'parked'
                ELSE 'waiting' END,
           g.priority, g.available_at,
           COALESCE(g.inline_seq, first.seq),
           CASE WHEN g.head_seq = COALESCE(g.inline_seq, first.seq) THEN g.head_attempts
                ELSE 0 END,
           LEAST(c_cap, (g.inline_seq IS NOT NULL)::int + counted.n)::int,
           (g.inline_seq IS NOT NULL)::int + counted.n >= c_cap,
           g.cancel_requested_at IS NOT NULL,
           COALESCE(q.name, 'default')
      FROM g
      LEFT JOIN @schema@.queues q ON q.id = g.queue_id
      LEFT JOIN LATERAL (SELECT m.seq FROM @schema@.transport_messages m
                          WHERE m.group_id = g.group_id
                          ORDER BY m.seq LIMIT 1) AS first ON true
      CROSS JOIN LATERAL (SELECT count(*)::int AS n
                            FROM (SELECT 1 FROM @schema@.transport_messages m
                                   WHERE m.group_id = g.group_id
                                   LIMIT c_cap) AS capped) AS counted
     ORDER BY g.group_id;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_list_groups(TEXT, TEXT, INT) FROM PUBLIC;
