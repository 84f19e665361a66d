-- harel-jobs migration 0020: a job's dependents resolved in bounded pages, in one lock order
-- (ADR 0037).
--
-- - `dependency_backlog`: a job that ended (completed, dead, cancelled) with dependents
--   that the transaction ending it did not resolve: past the bound one transaction resolves
--   (1,000 dependency rows), or in a group another transaction held at that moment (a
--   resolution never waits for a group it did not lock first, in group order). Its
--   outcome is kept here, so that the rest are resolved as it ended, whatever happens to
--   the job's own record meanwhile (a dead letter deleted, a completion not kept);
--   housekeeping (harel_resolve_backlog) resolves them a page at a time, and deletes the
--   row when none is left.
--
-- harel_resolve_dependents takes the bound and two modes (it plans the groups a settle
-- locks first; a producer's resolution touches only the groups it created) and returns the
-- planned groups; harel_end_cancelled can leave the resolution to its caller: new
-- signatures, the old ones dropped here (both are internal: no role has a grant on them).
DROP FUNCTION IF EXISTS "harel".harel_resolve_dependents(BIGINT[], TEXT[]);
DROP FUNCTION IF EXISTS "harel".harel_end_cancelled(TEXT[]);

-- (no unique key: a producer's or a settle's insert never waits for another transaction's
-- uncommitted one; a parent may have two rows, which housekeeping deletes together)
CREATE TABLE "harel".dependency_backlog (
    parent_id BIGINT      NOT NULL,
    outcome   TEXT        NOT NULL,
    ended_at  TIMESTAMPTZ NOT NULL
);

ALTER TABLE "harel".dependency_backlog
    ADD CONSTRAINT dependency_backlog_outcome_check
        CHECK (outcome IN ('completed', 'dead', 'cancelled'));

CREATE INDEX dependency_backlog_by_parent ON "harel".dependency_backlog (parent_id);
