-- harel-jobs migration 0015: jobs that wait for other jobs (dependencies, ADR 0033).
--
-- A job enqueued `after` other jobs (its parents) is queued like any job, in its group and
-- in its place there, but not before the *pending time* (9999-12-31): no claim reaches it,
-- and a group whose head it is waits. Its parents are recorded here. When a parent ends,
-- the function that ended it (harel_settle for a completion or a dead letter; a cancel)
-- resolves its dependents in the same transaction (harel_resolve_dependents): a dependent
-- whose parents have all completed gets its own start time back (harel_release_waiting); one
-- whose parent died or was cancelled is cancelled, with a reason naming the parent, unless
-- it asked to run whatever its parents' outcomes.
--
-- - `job_waits`: one row per job still waiting for parents: how many have not ended, the
--   outcomes of those that have, whether it runs after a failed parent, and the start time
--   it asked for (restored when it is released). Deleted when it is released or cancelled.
-- - `job_dependencies`: one row per (parent, waiting job) not resolved yet; looked up by
--   parent when a job ends (one index probe per settle: the cost of the feature for jobs
--   that have no dependents), and by waiting job when it is cancelled.
--
-- harel_publish takes the dependencies (three new arguments, default NULL): a new
-- signature, the old one dropped here (`migrate` gives every role that could execute it the
-- same right on the new one; callers of the old one, the previous release's producers,
-- call the new one unchanged).
DROP FUNCTION IF EXISTS "harel".harel_publish(
    TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[], TEXT[], BIGINT[], TEXT[],
    TEXT[], TEXT[]);

CREATE TABLE "harel".job_waits (
    job_id            BIGINT      PRIMARY KEY,
    -- its group (fixed at enqueue): its release locks the group's row without a lookup
    group_id          TEXT        NOT NULL,
    -- parents that have not ended yet
    waiting           INT         NOT NULL CHECK (waiting >= 0),
    -- run once every parent has ended, whatever their outcomes (else: cancelled when one
    -- fails)
    run_after_failure BOOLEAN     NOT NULL,
    -- the start the job asked for: a not-before time, or a delay counted from its release
    -- (NULL both: as soon as it is released)
    not_before        TIMESTAMPTZ,
    delay_ms          BIGINT,
    -- the parents' outcomes so far
    completed         INT         NOT NULL DEFAULT 0,
    dead              INT         NOT NULL DEFAULT 0,
    cancelled         INT         NOT NULL DEFAULT 0
);

CREATE TABLE "harel".job_dependencies (
    parent_id BIGINT NOT NULL,
    job_id    BIGINT NOT NULL,
    PRIMARY KEY (parent_id, job_id)
);

CREATE INDEX job_dependencies_by_job ON "harel".job_dependencies (job_id);

-- Called (once) when a schema first holds a job that waits for others or a workflow:
-- until then a settle reads it (outside MVCC, as the claim floors) and skips looking for
-- dependents and workflow tasks altogether, so that a queue that never uses them pays
-- nothing for them.
CREATE SEQUENCE "harel".dependents_seen AS BIGINT MINVALUE 0 START WITH 0;

-- Where harel_maintain's sweep of job_dependencies stopped (a parent's id): it resolves the
-- rows whose parent ended without resolving them (a producer holds no lock on a parent,
-- so a parent's settle can commit between the producer's look at it and its commit).
CREATE SEQUENCE "harel".dependency_sweep AS BIGINT MINVALUE 0 START WITH 0;

-- Workflows: jobs enqueued together under one id, each a named task waiting for earlier
-- tasks (a DAG), shown, cancelled and retried as a unit. A batch with a callback is a
-- workflow whose last task waits for all the others and runs whatever their outcomes.
CREATE TABLE "harel".workflows (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- how many tasks it has
    tasks      INT         NOT NULL
);

-- How many of a workflow's tasks ended, and how many of those did not complete (dead,
-- cancelled): appended by each transaction that ends some (a settle, a cancel; a retry
-- appends its negation), summed by the readers. Appended rather than counted on the
-- workflow's row, which every settle of the workflow would wait for (and a cancel of the
-- workflow, holding it, would wait for their groups: a cycle).
CREATE TABLE "harel".workflow_ends (
    workflow_id BIGINT NOT NULL,
    ended       INT    NOT NULL,
    failed      INT    NOT NULL
);

CREATE INDEX workflow_ends_by_workflow ON "harel".workflow_ends (workflow_id);

CREATE INDEX workflows_by_name ON "harel".workflows (name, id);

CREATE TABLE "harel".workflow_tasks (
    workflow_id BIGINT  NOT NULL,
    name        TEXT    NOT NULL,
    -- its place in the workflow (from 1): its parents come before it
    ordinal    INT     NOT NULL,
    -- the task's job (a retry of the task replaces it)
    job_id      BIGINT  NOT NULL,
    -- the names of the tasks it waits for (the graph's edges), and whether it runs when
    -- one of them fails (a retry of the task enqueues it so again)
    parents     TEXT[]  NOT NULL,
    run_after_failure BOOLEAN NOT NULL DEFAULT false,
    -- its parents' outcomes, recorded when it was released (a callback's counts)
    completed   INT,
    dead        INT,
    cancelled   INT,
    -- how its job ended ('completed', 'dead', 'cancelled'; NULL: queued), and when
    outcome     TEXT,
    ended_at    TIMESTAMPTZ,
    PRIMARY KEY (workflow_id, ordinal),
    UNIQUE (workflow_id, name)
);

CREATE UNIQUE INDEX workflow_tasks_by_job ON "harel".workflow_tasks (job_id);
