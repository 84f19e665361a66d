-- harel_job: one job's state and facts, by id. An operator's entry point (and an
-- application's, given the grant).
--
-- Takes:
--   p_id  the job's id (its message's seq)
-- Returns at most one row; none: no such job (it completed without retention, or its
--   history was pruned):
--   state             'waiting' (due, not started), 'scheduled' (not before `at`),
--                     'running' (attempt `attempts` since `started_at`, leased until `at`),
--                     'retrying' (the next attempt after `at`; at once after a lapsed
--                     lease), 'completed', 'dead', 'cancelled' (at `finished_at`); the
--                     queued states as harel_queued_state says
--   group_id, kind, payload, priority, enqueued_at, last_error, cancel_reason
--   attempts          attempts started so far, the running one included
--   at                see state; NULL for the finished states
--   started_at        when the current (or last) attempt began
--   finished_at       for the finished states
--   cancel_requested  a running job whose cancel was asked for
--   queue             its queue's name
--   fair_key          its fairness key ('' for none): its group's while queued
-- Fence: none: it reads. STABLE: every statement reads one snapshot, so a job moving
--   between tables is seen in exactly one place.
-- Locks: none.
-- Indexes: transport_messages_by_id; transport_groups' key for a group of its own ('own:'
--   and the id in 19 digits); transport_groups_by_inline_id for a named group's first
--   message (its predicate repeated word for word); the keys of job_history and
--   dead_letters.
-- Errors: none of its own.
--
-- Steps:
--   1. Where a queued job can be: transport_messages, its group of its own, a named group's
--      inline message; with its group's row, by key.
--   2. Its state (harel_queued_state) and facts, with its queue's name.
--   3. Otherwise job_history, otherwise dead_letters.
CREATE OR REPLACE FUNCTION "harel".harel_job(p_id BIGINT)
RETURNS TABLE (
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
    v_now TIMESTAMPTZ := clock_timestamp();
BEGIN
    RETURN QUERY
    WITH queued AS (
        SELECT m.seq, m.group_id, m.kind, m.payload, m.priority, m.enqueued_at, m.not_before,
               m.attempts, m.last_error
          FROM "harel".transport_messages m
         WHERE m.seq = p_id
        UNION ALL
        -- a group of its own, by its key
        SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
               g.inline_enqueued_at, g.inline_not_before, 0, g.inline_last_error
          FROM "harel".transport_groups g
         WHERE g.group_id = 'own:' || lpad(p_id::text, 19, '0') AND g.inline_seq = p_id
        UNION ALL
        -- the first message of a named group, by the partial index
        SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
               g.inline_enqueued_at, g.inline_not_before, 0, g.inline_last_error
          FROM "harel".transport_groups g
         WHERE g.inline_seq = p_id
           AND g.group_id <> 'own:' || lpad(g.inline_seq::text, 19, '0')
    ), facts AS (
        SELECT q.*, g.head_seq = q.seq AS is_head, g.head_attempts, g.head_started_at,
               g.locked_by, g.available_at, g.cancel_requested_at, g.cancel_reason,
               g.queue_id, g.fair_key
          FROM queued q
          LEFT JOIN LATERAL (SELECT t.* FROM "harel".transport_groups t
                              WHERE t.group_id = q.group_id OFFSET 0) AS g ON true
    )
    SELECT "harel".harel_queued_state(
               COALESCE(f.is_head, false), f.locked_by IS NOT NULL, f.available_at,
               CASE WHEN f.is_head THEN f.head_attempts ELSE f.attempts END, f.not_before,
               v_now),
           f.group_id, f.kind, f.payload::text, f.priority,
           CASE WHEN f.is_head THEN f.head_attempts ELSE f.attempts END,
           f.enqueued_at,
           CASE WHEN f.is_head AND (f.locked_by IS NOT NULL OR f.head_attempts > 0
                                   OR f.available_at > v_now)
                     THEN f.available_at
                WHEN f.not_before > v_now THEN f.not_before END,
           CASE WHEN f.is_head THEN f.head_started_at END,
           NULL::timestamptz, f.last_error,
           CASE WHEN f.is_head THEN f.cancel_reason END,
           COALESCE(f.is_head AND f.cancel_requested_at IS NOT NULL, false),
           (SELECT qs.name FROM "harel".queues qs WHERE qs.id = f.queue_id),
           COALESCE(f.fair_key, '')
      FROM facts f
    UNION ALL
    SELECT h.state, h.group_id, h.kind, h.payload::text, h.priority, h.attempts, h.enqueued_at,
           NULL, h.started_at, h.finished_at, h.last_error, h.cancel_reason, false, h.queue,
           h.fair_key
      FROM "harel".job_history h
     WHERE h.id = p_id
    UNION ALL
    SELECT 'dead', d.group_id, d.kind, d.payload::text, d.priority, d.attempts, d.enqueued_at,
           NULL, NULL, d.failed_at, d.last_error, NULL, false, d.queue,
           d.fair_key
      FROM "harel".dead_letters d
     WHERE d.id = p_id
     LIMIT 1;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_job(BIGINT) FROM PUBLIC;
