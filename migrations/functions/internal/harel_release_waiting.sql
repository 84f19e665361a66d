-- harel_release_waiting: gives jobs whose parents have all ended their own start times back
-- (ADR 0033): until now they were not due before the pending time. Internal: called by
-- harel_resolve_dependents, for a settle's batch at once.
--
-- Takes, one element per job:
--   p_jobs        the job's id
--   p_groups      its group (job_waits keeps it: a job's group never changes)
--   p_not_before  the start time it asked for when enqueued (NULL: at once)
-- Returns: nothing.
-- Fence: each job is looked for under its group's row lock, which the caller holds
--   (harel_resolve_dependents releases only dependents whose groups it locked); a job no
--   longer queued (cancelled meanwhile) is left alone.
-- Locks: none of its own: the caller holds the jobs' group rows (ADR 0037: a resolution
--   never waits for a group).
-- Indexes: transport_groups' key; transport_messages' key (group_id, seq); harel_fair_tags'
--   probes. Every row by its key, then by the TID that lookup found.
-- Errors: none of its own.
--
-- Steps:
--   1. Each job's group row, and whether the job is the head of a free group (which waits
--      for it, timed at the pending time); the tags of those due now (harel_fair_tags, one
--      call).
--   2. Each group row updated once: an inline job's not-before time set to its own, and a
--      head's group due at that time (tagged into the ready domain when due now). A leased
--      or parked group is left alone: the settle that moves it on meets the job. The other
--      jobs' not-before times set on their messages. Idle workers woken (harel_notify, the
--      lowest tag as the position).
CREATE OR REPLACE FUNCTION "harel".harel_release_waiting(
    p_jobs       BIGINT[],
    p_groups     TEXT[],
    p_not_before TIMESTAMPTZ[]
) RETURNS VOID
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
-- every table is reached by key
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- a tag's position in a NOTIFY (see harel_notify)
    c_hint_base CONSTANT BIGINT := 4611686018427387904;
    v_now      TIMESTAMPTZ;
    v_jobs     BIGINT[];
    v_groups   TEXT[];
    v_starts   TIMESTAMPTZ[];
    v_ctids    TID[];
    v_inline   BOOLEAN[];
    v_head     BOOLEAN[];
    v_queues   SMALLINT[];
    v_levels   SMALLINT[];
    v_keys     TEXT[];
    v_due_keys TEXT[];
    v_tags     BIGINT[];
BEGIN
    -- in group order
    SELECT array_agg(x.job ORDER BY x.group_id, x.job),
           array_agg(x.group_id ORDER BY x.group_id, x.job),
           array_agg(x.not_before ORDER BY x.group_id, x.job)
      INTO v_jobs, v_groups, v_starts
      FROM unnest(p_jobs, p_groups, p_not_before) AS x(job, group_id, not_before);
    IF v_jobs IS NULL THEN
        RETURN;
    END IF;
    v_now := clock_timestamp();

    -- Each job's group row (locked by the caller: a group's row cannot go while it holds a
    -- job, so a job whose row is gone is gone too), by its key, and whether the job is the
    -- group's head in a free group (which then waits for it, timed at the pending time),
    -- with the key of those due now (NULL for the others: harel_fair_tags leaves them be).
    SELECT array_agg(r.row_ctid ORDER BY x.ord), array_agg(x.job ORDER BY x.ord),
           array_agg(x.group_id ORDER BY x.ord), array_agg(x.not_before ORDER BY x.ord),
           array_agg(r.inline_seq IS NOT DISTINCT FROM x.job ORDER BY x.ord),
           array_agg(r.locked_by IS NULL
                     AND (r.inline_seq = x.job
                          OR (r.inline_seq IS NULL
                              AND x.job = (SELECT f.seq FROM "harel".transport_messages f
                                            WHERE f.group_id = x.group_id
                                            ORDER BY f.seq LIMIT 1)))
                     ORDER BY x.ord),
           array_agg(r.queue_id ORDER BY x.ord), array_agg(r.priority ORDER BY x.ord),
           array_agg(r.fair_key ORDER BY x.ord)
      INTO v_ctids, v_jobs, v_groups, v_starts, v_inline, v_head, v_queues, v_levels, v_keys
      FROM unnest(v_jobs, v_groups, v_starts) WITH ORDINALITY AS x(job, group_id, not_before, ord)
     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid, t.queue_id, t.priority, t.fair_key,
                                t.locked_by, t.inline_seq
                           FROM "harel".transport_groups t
                          WHERE t.group_id = x.group_id
                         OFFSET 0) AS r;
    IF v_ctids IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(CASE WHEN x.head AND (x.not_before IS NULL OR x.not_before <= v_now)
                          THEN x.fair_key END ORDER BY x.ord)
      INTO v_due_keys
      FROM unnest(v_head, v_starts, v_keys) WITH ORDINALITY AS x(head, not_before, fair_key, ord);
    IF cardinality(array_positions(v_due_keys, NULL)) < cardinality(v_due_keys) THEN
        v_tags := "harel".harel_fair_tags(v_queues, v_levels, v_due_keys);
    END IF;

    -- each group row once: an inline job's start time on it, and a head's group due at
    -- that time (tagged if due now)
    UPDATE "harel".transport_groups g
       SET inline_not_before = CASE WHEN x.inline THEN x.not_before
                                    ELSE g.inline_not_before END,
           available_at = CASE WHEN x.head THEN GREATEST(v_now, x.not_before)
                               ELSE g.available_at END,
           fair_tag = CASE WHEN NOT x.head THEN g.fair_tag
                           WHEN x.due_key IS NOT NULL THEN x.tag END
      FROM (SELECT DISTINCT ON (y.row_ctid) y.*
              FROM unnest(v_ctids, v_inline, v_head, v_starts, v_tags, v_due_keys)
                   AS y(row_ctid, inline, head, not_before, tag, due_key)
             WHERE y.inline OR y.head
             -- (a head first: an inline job is its group's head, and one group's head is
             -- one of its jobs)
             ORDER BY y.row_ctid, y.head DESC) AS x
     WHERE g.ctid = x.row_ctid;
    -- the others' start times on their messages
    UPDATE "harel".transport_messages m
       SET not_before = x.not_before
      FROM unnest(v_jobs, v_groups, v_starts, v_inline) AS x(job, group_id, not_before, inline)
     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM "harel".transport_messages t
                          WHERE t.group_id = x.group_id AND t.seq = x.job
                         OFFSET 0) AS k
     WHERE NOT x.inline AND m.ctid = k.row_ctid;
    IF v_tags IS NOT NULL THEN
        PERFORM "harel".harel_notify(
            (SELECT min(x.tag) FROM unnest(v_tags, v_due_keys) AS x(tag, due_key)
              WHERE x.due_key IS NOT NULL) - c_hint_base);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_release_waiting(BIGINT[], TEXT[], TIMESTAMPTZ[])
    FROM PUBLIC;
