-- harel_list_jobs_newest: a page of jobs newest first (descending id), filtered, with
-- keyset pagination (no OFFSET): harel_list_jobs walked the other way. An operator's entry
-- point (the dashboard's jobs list).
--
-- Takes:
--   p_state  NULL (any), 'queued' (pending, waiting, scheduled, running or retrying), or one state
--            of harel_job
--   p_kind, p_group, p_queue  filters, NULL for any
--   p_before the cursor: jobs with a smaller id (NULL: from the newest)
--   p_limit  1 to 1,000
-- Returns harel_job's columns with the id first: at most p_limit jobs in descending id
--   order, then ONE cursor row (state NULL) whose id is where the next (older) page starts
--   (pass it as p_before), NULL when nothing is left. A page may be short, even empty, with
--   a cursor: the filters kept few of the rows one call reads.
-- Fence: bounded work whatever the filters: each place a job can be (transport_messages,
--   the inline messages of transport_groups, job_history, dead_letters) is read by index
--   backwards from p_before, at most 2,000 rows each, and the page ends where the first
--   source that may have more ends (the highest of their lowest ids), so no job is skipped.
--   The kind and queue filters apply to the rows read: they never make a call read more.
--   STABLE: the page is one snapshot.
-- Locks: none.
-- Indexes: as harel_list_jobs, walked backwards: transport_messages_by_id, or its key
--   (group_id, seq) for p_group; transport_groups_by_inline_id (its predicate repeated);
--   transport_groups' key for groups of their own; the keys of job_history and
--   dead_letters.
-- Errors: 22023 for a limit out of range or an unknown state.
--
-- Steps:
--   1. Check the arguments.
--   2. Read up to 2,000 rows below p_before from each source, newest first: messages, named
--      groups' inline messages, groups of their own, job_history, dead_letters; with
--      p_group, its branch by the group's key instead.
--   3. The bound: the highest first-read-last id of a source that gave (or read) 2,000 rows.
--   4. Each queued job's state and facts (its group's row by key), then the finished ones.
--   5. Filter, order by id descending, cut at p_limit; then the cursor row.
CREATE OR REPLACE FUNCTION "harel".harel_list_jobs_newest(
    p_state TEXT,
    p_kind  TEXT,
    p_group TEXT,
    p_before BIGINT,
    p_limit INT,
    p_queue TEXT DEFAULT NULL
)
RETURNS TABLE (
    id               BIGINT,
    state            TEXT,
    group_id         TEXT,
    kind             TEXT,
    payload          TEXT,
    priority         SMALLINT,
    attempts         INT,
    enqueued_at      TIMESTAMPTZ,
    at               TIMESTAMPTZ,
    started_at       TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ,
    last_error       TEXT,
    cancel_reason    TEXT,
    cancel_requested BOOLEAN,
    queue            TEXT,
    fair_key         TEXT
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
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_before   BIGINT := COALESCE(p_before, 9223372036854775807);
    c_scan     CONSTANT INT := 2000;
    v_queued   BOOLEAN := p_state IS NULL
                          OR p_state IN ('queued', 'pending', 'waiting', 'scheduled', 'running',
                                         'retrying');
    v_history  BOOLEAN := p_state IS NULL OR p_state IN ('completed', 'cancelled');
    v_dead     BOOLEAN := p_state IS NULL OR p_state = 'dead';
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000
       OR (p_state IS NOT NULL AND p_state NOT IN ('queued', 'pending', 'waiting', 'scheduled', 'running',
                                                    'retrying', 'completed', 'dead',
                                                    'cancelled')) THEN
        RAISE EXCEPTION 'harel_list_jobs_newest: need a limit of 1 to 1000 and a known state (or NULL)'
            USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    -- Each queued source has two branches, one for all groups and one for p_group, so that
    -- a group is read by its key (the generic plan skips the branch whose one-time filter
    -- is false). A condition "p_group IS NULL OR group_id = p_group" instead read the whole
    -- queue for a group (filtered out of an index walk in id order).
    WITH m AS MATERIALIZED (
        (SELECT t.seq, t.group_id, t.kind, t.payload, t.priority, t.enqueued_at, t.not_before,
                t.attempts, t.last_error
           FROM "harel".transport_messages t
          WHERE v_queued AND p_group IS NULL AND t.seq < v_before
          ORDER BY t.seq DESC
          LIMIT c_scan)
        UNION ALL
        (SELECT t.seq, t.group_id, t.kind, t.payload, t.priority, t.enqueued_at, t.not_before,
                t.attempts, t.last_error
           FROM "harel".transport_messages t
          WHERE v_queued AND t.group_id = p_group AND t.seq < v_before
          ORDER BY t.seq DESC
          LIMIT c_scan)
    ), i AS MATERIALIZED (
        -- first messages of named groups, by the partial index (or p_group's key)
        (SELECT t.inline_seq AS seq, t.group_id, t.inline_kind AS kind,
                t.inline_payload AS payload, t.priority, t.inline_enqueued_at AS enqueued_at,
                t.inline_not_before AS not_before, 0 AS attempts,
                t.inline_last_error AS last_error
           FROM "harel".transport_groups t
          WHERE v_queued AND p_group IS NULL AND t.inline_seq < v_before
            AND t.group_id <> 'own:' || lpad(t.inline_seq::text, 19, '0')
          ORDER BY t.inline_seq DESC
          LIMIT c_scan)
        UNION ALL
        -- p_group's row by its key (a lookup the planner cannot turn into a walk of the
        -- inline index: nothing but the key inside the LATERAL), then its inline message
        (SELECT t.inline_seq AS seq, t.group_id, t.inline_kind AS kind,
                t.inline_payload AS payload, t.priority, t.inline_enqueued_at AS enqueued_at,
                t.inline_not_before AS not_before, 0 AS attempts,
                t.inline_last_error AS last_error
           FROM (SELECT p_group AS group_id WHERE v_queued AND p_group IS NOT NULL) AS k
           JOIN LATERAL (SELECT g.* FROM "harel".transport_groups g
                          WHERE g.group_id = k.group_id OFFSET 0) AS t ON true
          WHERE t.inline_seq < v_before
            AND t.group_id <> 'own:' || lpad(t.inline_seq::text, 19, '0'))
    ), o AS MATERIALIZED (
        -- jobs in groups of their own, by the groups' key: 'own:' and 19 digits sort as
        -- the seqs do (';' follows ':')
        (SELECT t.inline_seq AS seq, t.group_id, t.inline_kind AS kind,
                t.inline_payload AS payload, t.priority, t.inline_enqueued_at AS enqueued_at,
                t.inline_not_before AS not_before, 0 AS attempts,
                t.inline_last_error AS last_error
           FROM "harel".transport_groups t
          WHERE v_queued AND p_group IS NULL
            AND t.group_id < 'own:' || lpad(v_before::text, 19, '0')
            AND t.group_id > 'own:'
            AND t.group_id = 'own:' || lpad(t.inline_seq::text, 19, '0')
          ORDER BY t.group_id DESC
          LIMIT c_scan)
        UNION ALL
        (SELECT t.inline_seq AS seq, t.group_id, t.inline_kind AS kind,
                t.inline_payload AS payload, t.priority, t.inline_enqueued_at AS enqueued_at,
                t.inline_not_before AS not_before, 0 AS attempts,
                t.inline_last_error AS last_error
           FROM (SELECT p_group AS group_id WHERE v_queued AND p_group IS NOT NULL) AS k
           JOIN LATERAL (SELECT g.* FROM "harel".transport_groups g
                          WHERE g.group_id = k.group_id OFFSET 0) AS t ON true
          WHERE t.group_id < 'own:' || lpad(v_before::text, 19, '0')
            AND t.group_id = 'own:' || lpad(t.inline_seq::text, 19, '0'))
    ), hw AS MATERIALIZED (
        -- finished jobs have no index by group: read c_scan of them by id, then filter, so
        -- a group's finished jobs come in bounded (possibly empty) pages
        SELECT t.* FROM "harel".job_history t
         WHERE v_history AND t.id < v_before
         ORDER BY t.id DESC
         LIMIT c_scan
    ), h AS MATERIALIZED (
        SELECT x.* FROM hw x WHERE p_group IS NULL OR x.group_id = p_group
    ), dw AS MATERIALIZED (
        SELECT t.* FROM "harel".dead_letters t
         WHERE v_dead AND t.id < v_before
         ORDER BY t.id DESC
         LIMIT c_scan
    ), d AS MATERIALIZED (
        SELECT x.* FROM dw x WHERE p_group IS NULL OR x.group_id = p_group
    ), bound AS (
        -- a source that gave (or, for the finished jobs, read) c_scan rows may have more
        -- below its lowest: this page ends where the first such source's rows end (the
        -- highest of those lowest ids), so that no job is skipped
        SELECT GREATEST((SELECT min(x.seq) FROM m x HAVING count(*) = c_scan),
                        (SELECT min(x.seq) FROM i x HAVING count(*) = c_scan),
                        (SELECT min(x.seq) FROM o x HAVING count(*) = c_scan),
                        (SELECT min(x.id) FROM hw x HAVING count(*) = c_scan),
                        (SELECT min(x.id) FROM dw x HAVING count(*) = c_scan)) AS downto
    ), queued AS (
        SELECT q.*, g.head_seq = q.seq AS is_head, g.head_attempts, g.head_started_at,
               g.locked_by, g.available_at, g.cancel_requested_at, g.cancel_reason,
               g.queue_id, g.fair_key
          FROM (SELECT * FROM m UNION ALL SELECT * FROM i UNION ALL SELECT * FROM o) AS q
          LEFT JOIN LATERAL (SELECT t.* FROM "harel".transport_groups t
                              WHERE t.group_id = q.group_id OFFSET 0) AS g ON true
    ), found AS (
        SELECT f.seq AS id,
               "harel".harel_queued_state(
                   COALESCE(f.is_head, false), f.locked_by IS NOT NULL, f.available_at,
                   CASE WHEN f.is_head THEN f.head_attempts ELSE f.attempts END,
                   f.not_before, v_now) AS state,
               f.group_id, f.kind, f.payload::text AS payload, f.priority,
               CASE WHEN f.is_head THEN f.head_attempts ELSE f.attempts END AS attempts,
               f.enqueued_at,
               CASE WHEN f.is_head AND (f.locked_by IS NOT NULL OR f.head_attempts > 0
                                   OR f.available_at > v_now)
                         THEN f.available_at
                    WHEN f.not_before > v_now THEN f.not_before END AS at,
               CASE WHEN f.is_head THEN f.head_started_at END AS started_at,
               NULL::timestamptz AS finished_at, f.last_error,
               CASE WHEN f.is_head THEN f.cancel_reason END AS cancel_reason,
               COALESCE(f.is_head AND f.cancel_requested_at IS NOT NULL, false)
                   AS cancel_requested,
               (SELECT qs.name FROM "harel".queues qs WHERE qs.id = f.queue_id) AS queue,
               COALESCE(f.fair_key, '') AS fair_key
          FROM queued f
        UNION ALL
        SELECT x.id, x.state, x.group_id, x.kind, x.payload::text, x.priority, x.attempts,
               x.enqueued_at, NULL, x.started_at, x.finished_at, x.last_error,
               x.cancel_reason, false, x.queue, x.fair_key
          FROM h x
        UNION ALL
        SELECT x.id, 'dead', x.group_id, x.kind, x.payload::text, x.priority, x.attempts,
               x.enqueued_at, NULL, NULL, x.failed_at, x.last_error, NULL, false, x.queue,
               x.fair_key
          FROM d x
    ), page AS MATERIALIZED (
        SELECT r.* FROM found r, bound b
         WHERE (b.downto IS NULL OR r.id >= b.downto)
           AND (p_kind IS NULL OR r.kind = p_kind)
           AND (p_queue IS NULL OR r.queue = p_queue)
           AND (p_state IS NULL OR r.state = p_state
                OR (p_state = 'queued'
                    AND r.state IN ('pending', 'waiting', 'scheduled', 'running',
                                    'retrying')))
         ORDER BY r.id DESC
         LIMIT p_limit
    )
    SELECT * FROM (SELECT * FROM page p ORDER BY p.id DESC) AS rows
    UNION ALL
    SELECT CASE WHEN (SELECT count(*) FROM page) = p_limit THEN (SELECT min(p.id) FROM page p)
                ELSE (SELECT b.downto FROM bound b) END,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_list_jobs_newest(TEXT, TEXT, TEXT, BIGINT, INT, TEXT)
    FROM PUBLIC;
