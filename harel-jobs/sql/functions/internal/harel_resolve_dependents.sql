-- harel_resolve_dependents: resolves the dependents of jobs that ended (ADR 0033), at most a
-- bounded number in the transaction that ended them, and records the outcomes of those that
-- are workflow tasks; what it leaves is recorded in dependency_backlog for housekeeping
-- (ADR 0037). Internal: called by harel_settle (completed and dead jobs that have dependents
-- or are workflow tasks; first to plan the groups its fence locks), harel_end_cancelled,
-- harel_cancel and harel_cancel_group (cancelled jobs), harel_hold (parents that had ended
-- before their dependent was enqueued), harel_maintain's sweep and harel_resolve_backlog.
--
-- Takes, one element per job that ended:
--   p_jobs        its id
--   p_outcomes    'completed', 'dead' or 'cancelled'
-- and:
--   p_plan        true: write nothing, lock nothing, and return the groups of the
--                 dependents a call would resolve first (a settle locks them in its fence)
--   p_dependents  NULL, or the only dependents this call may touch (a producer's new jobs):
--                 it resolves those in groups of their own, which nobody else sees, and
--                 leaves the others to housekeeping (a producer holds no group a worker
--                 waits for)
--   p_budget      the dependency rows this call may resolve (NULL: 1,000; a dependent of a
--                 failed parent counts 10)
--   p_backlog     true: the jobs may have rows in dependency_backlog (housekeeping's
--                 calls), deleted for those whose dependents are all resolved
-- Returns: with p_plan, the groups; else nothing.
-- Fence: an ended job that is a workflow task gets its outcome recorded (once: its end is
--   one transaction). A dependency row is resolved once: deleted by the transaction holding
--   its dependent's group row. A dependent's count is decremented under that lock (and its
--   job_waits row's), so of several parents ending at once exactly one transaction sees it
--   reach 0 and releases it. A cancelled job that was itself waiting leaves nothing behind
--   (its job_waits and dependency rows deleted).
-- Locks: the dependents' group rows, FOR NO KEY UPDATE SKIP LOCKED: it never waits for a
--   group (the settle locked the planned ones in its fence, in group order; a group another
--   transaction holds is left to housekeeping); then their job_waits rows, in job order
--   (every writer of a job_waits row holds its job's group first, so that never waits).
-- Indexes: job_dependencies' key (by parent, a bounded range each) and
--   job_dependencies_by_job; job_waits' key; workflow_tasks_by_job; transport_groups' key;
--   dependency_backlog_by_parent.
-- Errors: none of its own.
--
-- Steps, for the jobs that ended, then (cascading) for the dependents it cancelled, while
-- the budget lasts:
--   1. Cancelled jobs that were waiting: their job_waits and dependency rows deleted.
--      Workflow tasks among the ended jobs: their outcomes recorded.
--   2. Candidates: each parent's dependency rows (in its key's order), a share of the
--      budget each (at least 16), taken round-robin across parents up to the budget (a
--      dependent of a failed parent, which is cancelled, counts 10 rows); with p_plan,
--      their groups returned.
--   3. Their groups locked without waiting; the candidates whose group this transaction
--      holds are resolved: their rows deleted, counted per dependent, and (under the
--      dependents' job_waits rows, locked in job order) their counts decremented:
--      - no parent left (and none failed, or it runs after failure): released
--        (harel_release_waiting), its parents' outcomes kept on its workflow task;
--      - a parent failed (dead, cancelled) and it does not run after failure: cancelled
--        (harel_cancel_waiting, the reason naming the parent); its own dependents are the
--        next round's parents.
--   4. Parents with dependency rows left (looked for only where this round did not read
--      and resolve them all) go round again while the budget lasts and the round resolved
--      some (their shares grow as the others' run out), else get a row in
--      dependency_backlog (their outcome); with p_backlog, those with none left have their
--      backlog rows deleted.
CREATE OR REPLACE FUNCTION @schema@.harel_resolve_dependents(
    p_jobs       BIGINT[],
    p_outcomes   TEXT[],
    p_plan       BOOLEAN DEFAULT false,
    p_dependents BIGINT[] DEFAULT NULL,
    p_budget     INT DEFAULT NULL,
    p_backlog    BOOLEAN DEFAULT false
) RETURNS SETOF TEXT
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
    -- the dependency rows one transaction resolves: what a settle adds to its batch's time
    -- whatever the number of dependents (ADR 0037)
    c_budget CONSTANT INT := 1000;
    -- what a failed parent's dependent costs of it (it is cancelled: ~10 times a release)
    c_cancel_cost CONSTANT INT := 10;
    v_budget          INT := COALESCE(p_budget, c_budget);
    v_parents         BIGINT[];
    v_outcomes        TEXT[];
    v_per             INT;
    v_cand_parents    BIGINT[];
    v_cand_jobs       BIGINT[];
    v_cand_groups     TEXT[];
    v_locked          TEXT[];
    v_pair_parents    BIGINT[];
    v_pair_jobs       BIGINT[];
    v_children        BIGINT[];
    v_n               INT[];
    v_completed       INT[];
    v_dead            INT[];
    v_cancelled       INT[];
    v_failed_parents  BIGINT[];
    v_failed_outcomes TEXT[];
    v_cancel          BIGINT[];
    v_cancel_groups   TEXT[];
    v_reasons         TEXT[];
    v_release         BIGINT[];
    v_groups          TEXT[];
    v_starts          TIMESTAMPTZ[];
    v_ended_at        TIMESTAMPTZ;
    v_resolved        INT;
    v_left            BIGINT[];
    v_left_outcomes   TEXT[];
    v_again           BOOLEAN;
    v_fresh           INT;
    v_check           BIGINT[];
BEGIN
    SELECT array_agg(x.job ORDER BY x.job), array_agg(x.outcome ORDER BY x.job)
      INTO v_parents, v_outcomes
      FROM (SELECT DISTINCT ON (u.job) u.job, u.outcome
              FROM unnest(p_jobs, p_outcomes) AS u(job, outcome)
             WHERE u.job IS NOT NULL
             ORDER BY u.job) AS x;

    v_fresh := COALESCE(cardinality(v_parents), 0);
    WHILE v_parents IS NOT NULL LOOP
        -- (the round's first v_fresh parents ended here; the others are continued)
        IF NOT p_plan AND v_fresh > 0 THEN
            IF 'cancelled' = ANY (v_outcomes[1:v_fresh]) THEN
                DELETE FROM @schema@.job_waits w WHERE w.job_id = ANY (v_parents[1:v_fresh]);
                DELETE FROM @schema@.job_dependencies d
                 WHERE d.job_id = ANY (v_parents[1:v_fresh]);
            END IF;
            -- the ended jobs that are workflow tasks: their outcomes recorded, and counted
            -- for their workflows as rows of workflow_ends (appended: no row that every
            -- settle of a workflow would wait for)
            -- (the time taken before: Citus takes no volatile function in an UPDATE)
            v_ended_at := clock_timestamp();
            WITH ended AS (
                UPDATE @schema@.workflow_tasks s
                   SET outcome = e.outcome, ended_at = v_ended_at
                  FROM unnest(v_parents[1:v_fresh], v_outcomes[1:v_fresh])
                       AS e(job_id, outcome)
                 CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.workflow_tasks t
                                      WHERE t.job_id = e.job_id OFFSET 0) AS k
                 WHERE s.ctid = k.row_ctid AND s.outcome IS NULL
                RETURNING s.workflow_id, s.outcome
            )
            INSERT INTO @schema@.workflow_ends (workflow_id, ended, failed, cancelled)
            SELECT x.workflow_id, count(*)::int,
                   count(*) FILTER (WHERE x.outcome <> 'completed')::int,
                   count(*) FILTER (WHERE x.outcome = 'cancelled')::int
              FROM ended x
             GROUP BY x.workflow_id;
        END IF;

        -- The candidates: each parent's dependents (by its key), a share of the
        -- budget each, round-robin across parents (one parent's thousands do not crowd out
        -- the others' few), within the budget. A bounded range of the key per parent. A
        -- failed parent's dependent costs the budget c_cancel_cost rows: cancelling it (a
        -- history row, its group moved on or dropped) takes about that many releases' time.
        v_per := GREATEST(16, ceil(GREATEST(v_budget, 0)::numeric / cardinality(v_parents))::int);
        SELECT array_agg(c.parent_id ORDER BY c.rn, c.parent_id)
                   FILTER (WHERE c.spent <= GREATEST(v_budget, 0)),
               array_agg(c.job_id ORDER BY c.rn, c.parent_id)
                   FILTER (WHERE c.spent <= GREATEST(v_budget, 0)),
               array_agg(c.group_id ORDER BY c.rn, c.parent_id)
                   FILTER (WHERE c.spent <= GREATEST(v_budget, 0)),
               -- (the parents that may have rows past those read: a full share, or rows
               -- past the budget; the others' rows were all read)
               array_agg(DISTINCT c.parent_id)
                   FILTER (WHERE c.spent > GREATEST(v_budget, 0) OR c.n_read >= c.share)
          INTO v_cand_parents, v_cand_jobs, v_cand_groups, v_check
          FROM (SELECT y.*, sum(y.cost) OVER (ORDER BY y.rn, y.parent_id
                                              ROWS UNBOUNDED PRECEDING) AS spent
                  FROM (SELECT p.parent_id, d.job_id, w.group_id, p.cost, p.share,
                               count(*) OVER (PARTITION BY p.parent_id) AS n_read,
                               row_number() OVER (PARTITION BY p.parent_id
                                                  ORDER BY d.job_id) AS rn
                          FROM (SELECT q.*, ceil(v_per::numeric / q.cost)::int AS share
                                  FROM (SELECT u.parent_id,
                                               CASE u.outcome WHEN 'completed' THEN 1
                                                              ELSE c_cancel_cost END AS cost
                                          FROM unnest(v_parents, v_outcomes)
                                               AS u(parent_id, outcome)) AS q) AS p
                         CROSS JOIN LATERAL (SELECT t.job_id
                                               FROM @schema@.job_dependencies t
                                              WHERE t.parent_id = p.parent_id
                                                AND (p_dependents IS NULL
                                                     OR t.job_id = ANY (p_dependents))
                                              -- (no ORDER BY: the key gives them in job
                                              -- order; asked for an order, under stale
                                              -- statistics the planner walked the index
                                              -- by job instead, whose order it is too)
                                              LIMIT p.share) AS d
                          LEFT JOIN LATERAL (SELECT t.group_id FROM @schema@.job_waits t
                                              WHERE t.job_id = d.job_id OFFSET 0) AS w
                            ON true) AS y) AS c;
        IF p_plan THEN
            RETURN QUERY SELECT DISTINCT g.group_id FROM unnest(v_cand_groups) AS g(group_id)
                          WHERE g.group_id IS NOT NULL;
            RETURN;
        END IF;

        v_cancel := NULL;
        v_resolved := NULL;
        IF v_cand_jobs IS NOT NULL THEN
            -- Their groups, never waiting: the ones the caller locked first (a settle's
            -- plan) are ours already; one another transaction holds is left to
            -- housekeeping, so that no resolution waits for a group out of order.
            -- (a producer's call: only its jobs in groups of their own, which it created
            -- and nobody else sees; a producer holds no group a worker waits for)
            SELECT array_agg(l.group_id) INTO v_locked
              FROM (SELECT t.group_id FROM @schema@.transport_groups t
                     WHERE t.group_id = ANY (ARRAY(
                               SELECT c.group_id
                                 FROM unnest(v_cand_jobs, v_cand_groups) AS c(job_id, group_id)
                                WHERE p_dependents IS NULL
                                   OR c.group_id = 'own:' || lpad(c.job_id::text, 19, '0')))
                     ORDER BY t.group_id
                       FOR NO KEY UPDATE SKIP LOCKED) AS l;
            -- (a dependency row without a wait is an orphan: deleted, counted by nobody)
            SELECT array_agg(c.parent_id) FILTER (WHERE c.mine),
                   array_agg(c.job_id) FILTER (WHERE c.mine),
                   v_check || array_agg(DISTINCT c.parent_id) FILTER (WHERE NOT c.mine)
              INTO v_pair_parents, v_pair_jobs, v_check
              FROM (SELECT u.*, u.group_id IS NULL OR u.group_id = ANY (COALESCE(v_locked, '{}'))
                               AS mine
                      FROM unnest(v_cand_parents, v_cand_jobs, v_cand_groups)
                           AS u(parent_id, job_id, group_id)) AS c;
        ELSE
            v_pair_parents := NULL;
        END IF;

        IF v_pair_parents IS NOT NULL THEN
            PERFORM 1 FROM @schema@.job_waits w
             WHERE w.job_id = ANY (v_pair_jobs)
             ORDER BY w.job_id
               FOR UPDATE;
            -- The rows resolved once (deleted here: a new statement, after the locks),
            -- counted per dependent
            WITH gone AS (
                DELETE FROM @schema@.job_dependencies d
                 USING unnest(v_pair_parents, v_pair_jobs) AS x(parent_id, job_id)
                 CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid
                                       FROM @schema@.job_dependencies t
                                      WHERE t.parent_id = x.parent_id
                                        AND t.job_id = x.job_id OFFSET 0) AS k
                 WHERE d.ctid = k.row_ctid
                RETURNING d.parent_id, d.job_id
            )
            SELECT array_agg(c.job_id ORDER BY c.job_id), array_agg(c.n ORDER BY c.job_id),
                   array_agg(c.n_completed ORDER BY c.job_id),
                   array_agg(c.n_dead ORDER BY c.job_id),
                   array_agg(c.n_cancelled ORDER BY c.job_id),
                   array_agg(c.failed_parent ORDER BY c.job_id),
                   array_agg(c.failed_outcome ORDER BY c.job_id),
                   sum(c.cost)::int
              INTO v_children, v_n, v_completed, v_dead, v_cancelled, v_failed_parents,
                   v_failed_outcomes, v_resolved
              FROM (SELECT g.job_id, count(*)::int AS n,
                           sum(CASE e.outcome WHEN 'completed' THEN 1
                                              ELSE c_cancel_cost END)::int AS cost,
                           count(*) FILTER (WHERE e.outcome = 'completed')::int AS n_completed,
                           count(*) FILTER (WHERE e.outcome = 'dead')::int AS n_dead,
                           count(*) FILTER (WHERE e.outcome = 'cancelled')::int AS n_cancelled,
                           min(g.parent_id) FILTER (WHERE e.outcome <> 'completed')
                               AS failed_parent,
                           (array_agg(e.outcome ORDER BY g.parent_id)
                                FILTER (WHERE e.outcome <> 'completed'))[1] AS failed_outcome
                      FROM gone g
                      -- (a hash join of the parents with what it deleted: linear in both)
                      JOIN unnest(v_parents, v_outcomes) AS e(job_id, outcome)
                        ON e.job_id = g.parent_id
                     GROUP BY g.job_id) AS c;
            v_budget := v_budget - COALESCE(v_resolved, 0);

            IF v_children IS NOT NULL THEN
                -- Each dependent's count (its rows locked above: a statement after the
                -- locks, it sees the counts they committed)
                WITH counted AS (
                    UPDATE @schema@.job_waits w
                       SET waiting = w.waiting - x.n,
                           completed = w.completed + x.n_completed,
                           dead = w.dead + x.n_dead,
                           cancelled = w.cancelled + x.n_cancelled
                      FROM unnest(v_children, v_n, v_completed, v_dead, v_cancelled,
                                  v_failed_parents, v_failed_outcomes)
                           AS x(job_id, n, n_completed, n_dead, n_cancelled, failed_parent,
                                failed_outcome)
                     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.job_waits t
                                          WHERE t.job_id = x.job_id OFFSET 0) AS k
                     WHERE w.ctid = k.row_ctid
                    RETURNING w.job_id, w.group_id, w.waiting, w.run_after_failure,
                              w.not_before, w.delay_ms, w.completed, w.dead, w.cancelled,
                              x.failed_parent, x.failed_outcome
                )
                SELECT array_agg(c.job_id ORDER BY c.job_id)
                           FILTER (WHERE c.failed_parent IS NOT NULL
                                     AND NOT c.run_after_failure),
                       array_agg(c.group_id ORDER BY c.job_id)
                           FILTER (WHERE c.failed_parent IS NOT NULL
                                     AND NOT c.run_after_failure),
                       array_agg(format('job %s, which it waited for, %s', c.failed_parent,
                                        CASE c.failed_outcome
                                            WHEN 'dead' THEN 'became a dead letter'
                                            ELSE 'was cancelled' END)
                                 ORDER BY c.job_id)
                           FILTER (WHERE c.failed_parent IS NOT NULL
                                     AND NOT c.run_after_failure),
                       array_agg(c.job_id ORDER BY c.job_id)
                           FILTER (WHERE c.waiting = 0
                                     AND (c.failed_parent IS NULL OR c.run_after_failure)),
                       array_agg(c.group_id ORDER BY c.job_id)
                           FILTER (WHERE c.waiting = 0
                                     AND (c.failed_parent IS NULL OR c.run_after_failure)),
                       -- (a delay counts from the release: now)
                       array_agg(COALESCE(c.not_before,
                                          clock_timestamp()
                                          + c.delay_ms * interval '1 millisecond')
                                 ORDER BY c.job_id)
                           FILTER (WHERE c.waiting = 0
                                     AND (c.failed_parent IS NULL OR c.run_after_failure)),
                       array_agg(c.completed ORDER BY c.job_id)
                           FILTER (WHERE c.waiting = 0
                                     AND (c.failed_parent IS NULL OR c.run_after_failure)),
                       array_agg(c.dead ORDER BY c.job_id)
                           FILTER (WHERE c.waiting = 0
                                     AND (c.failed_parent IS NULL OR c.run_after_failure)),
                       array_agg(c.cancelled ORDER BY c.job_id)
                           FILTER (WHERE c.waiting = 0
                                     AND (c.failed_parent IS NULL OR c.run_after_failure))
                  INTO v_cancel, v_cancel_groups, v_reasons, v_release, v_groups, v_starts,
                       v_completed, v_dead, v_cancelled
                  FROM counted c;

                -- The released: their waits gone, a workflow task's parents' outcomes kept
                -- (a callback reads them), their own start times back (one call).
                IF v_release IS NOT NULL THEN
                    DELETE FROM @schema@.job_waits w WHERE w.job_id = ANY (v_release);
                    UPDATE @schema@.workflow_tasks s
                       SET completed = x.completed, dead = x.dead, cancelled = x.cancelled
                      FROM unnest(v_release, v_completed, v_dead, v_cancelled)
                           AS x(job_id, completed, dead, cancelled)
                     CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid
                                           FROM @schema@.workflow_tasks t
                                          WHERE t.job_id = x.job_id OFFSET 0) AS k
                     WHERE s.ctid = k.row_ctid;
                    PERFORM @schema@.harel_release_waiting(v_release, v_groups, v_starts);
                END IF;
                -- The cancelled (a parent failed): ended as cancelled, their waits gone in
                -- the next round's first step, where their own dependents are resolved.
                IF v_cancel IS NOT NULL THEN
                    PERFORM @schema@.harel_cancel_waiting(v_cancel, v_cancel_groups,
                                                          v_reasons);
                END IF;
            END IF;
        END IF;

        -- The parents with dependents left (a probe each): again in the next round while
        -- the budget lasts and this round resolved some (their share grows as others ran
        -- out), else to housekeeping, as they ended. A parent with none left needs no
        -- backlog row any more.
        SELECT array_agg(p.parent_id ORDER BY p.parent_id),
               array_agg(p.outcome ORDER BY p.parent_id)
          INTO v_left, v_left_outcomes
          FROM unnest(v_parents, v_outcomes) AS p(parent_id, outcome)
         -- (only those whose rows were not all read and resolved here)
         WHERE p.parent_id = ANY (COALESCE(v_check, '{}'))
           AND EXISTS (SELECT 1 FROM @schema@.job_dependencies t
                        WHERE t.parent_id = p.parent_id
                          AND (p_dependents IS NULL OR t.job_id = ANY (p_dependents)));
        v_again := v_left IS NOT NULL AND v_budget > 0 AND COALESCE(v_resolved, 0) > 0;
        IF v_left IS NOT NULL AND NOT v_again THEN
            INSERT INTO @schema@.dependency_backlog (parent_id, outcome, ended_at)
            SELECT p.parent_id, p.outcome, clock_timestamp()
              FROM unnest(v_left, v_left_outcomes) AS p(parent_id, outcome)
             -- (no unique key: an insert never waits for another transaction's; two rows
             -- of one parent cost housekeeping a probe)
             WHERE NOT EXISTS (SELECT 1 FROM @schema@.dependency_backlog b
                                WHERE b.parent_id = p.parent_id);
        END IF;
        IF p_backlog THEN
            -- (only the rows no other housekeeping call holds: it deletes its own)
            DELETE FROM @schema@.dependency_backlog b
             WHERE b.ctid = ANY (ARRAY(
                       SELECT t.ctid FROM @schema@.dependency_backlog t
                        WHERE t.parent_id = ANY (v_parents)
                          AND NOT (t.parent_id = ANY (COALESCE(v_left, '{}')))
                          FOR UPDATE SKIP LOCKED));
        END IF;

        -- The next round: the dependents cancelled here, whose own dependents are resolved
        -- in turn while the budget lasts (past it, they go to the backlog, next round), and
        -- the parents continued (their first step done already).
        v_fresh := COALESCE(cardinality(v_cancel), 0);
        v_parents := v_cancel;
        v_outcomes := array_fill('cancelled'::text, ARRAY[v_fresh]);
        IF v_again THEN
            v_parents := COALESCE(v_parents, '{}') || v_left;
            v_outcomes := v_outcomes || v_left_outcomes;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_resolve_dependents(BIGINT[], TEXT[], BOOLEAN, BIGINT[], INT,
                                                         BOOLEAN)
    FROM PUBLIC;
