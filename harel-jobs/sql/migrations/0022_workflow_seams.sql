-- harel-jobs migration 0022: where workflows meet the rest of the queue (issue 42, items 6 to
-- 10; ADR 0040): a cancelled workflow, its counts by outcome, callbacks run again by a
-- retry, and ended workflows pruned.
--
-- - `workflows.cancelled_at`: when an operator cancelled the workflow
--   (harel_cancel_workflow, when a task had not ended); a retry of its tasks clears it.
-- - `workflow_ends.cancelled`: of the tasks a row counts as failed, how many were cancelled
--   (the others became dead letters). The rows written before this migration say nothing of
--   it: one row per workflow that has cancelled tasks adds them (ended 0, failed 0), counted
--   from the tasks' recorded outcomes. Exact: the ALTERs below wait for every transaction
--   that was changing these tables (a settle or cancel records a task's outcome and its
--   row of workflow_ends in one statement; a retry holds its workflow's row) and hold off
--   new ones until this migration commits.
-- - `workflow_reruns`: for each task that runs whatever its parents' outcomes (a batch's
--   callback), what its job was enqueued with (group, kind, payload, priority, queue,
--   fairness key), so that a retry of a task it counted as failed runs it again with the
--   new counts even when its completed job was not kept (completions usually are not).
--   A table of its own rather than columns of workflow_tasks: an ALTER of workflow_tasks
--   would wait for settles that hold it and wait for workflow_ends, which this migration
--   holds. Callbacks enqueued before it have no row: they run again only while their job
--   is kept (job_history, dead_letters).
-- - `workflow_sweep`, `workflow_sweep_task`: where harel_maintain's prune of ended
--   workflows (harel_prune_workflows) stopped: a workflow id and a task ordinal, outside
--   MVCC, as step_sweep.
--
-- harel_workflow and harel_workflows return the counts by outcome and the cancel's time
-- (two more columns): new return types, so the old functions are dropped here (`migrate`
-- gives every role that could execute them the same right on the new ones; the previous
-- release's calls name their columns and work unchanged).
DROP FUNCTION IF EXISTS @schema@.harel_workflow(BIGINT);
DROP FUNCTION IF EXISTS @schema@.harel_workflows(TEXT, BIGINT, INT);

ALTER TABLE @schema@.workflows ADD COLUMN cancelled_at TIMESTAMPTZ;

ALTER TABLE @schema@.workflow_ends ADD COLUMN cancelled INT NOT NULL DEFAULT 0;

INSERT INTO @schema@.workflow_ends (workflow_id, ended, failed, cancelled)
SELECT t.workflow_id, 0, 0, count(*)::int
  FROM @schema@.workflow_tasks t
 WHERE t.outcome = 'cancelled'
 GROUP BY t.workflow_id;

CREATE TABLE @schema@.workflow_reruns (
    workflow_id BIGINT   NOT NULL,
    ordinal     INT      NOT NULL,
    -- as harel_publish took them (NULL group: a group of its own; NULL queue: default)
    group_id    TEXT,
    kind        TEXT     NOT NULL,
    payload     JSON     NOT NULL,
    priority    SMALLINT,
    queue       TEXT,
    fair_key    TEXT,
    PRIMARY KEY (workflow_id, ordinal)
);

CREATE SEQUENCE @schema@.workflow_sweep AS BIGINT MINVALUE 0 START WITH 0;
CREATE SEQUENCE @schema@.workflow_sweep_task AS BIGINT MINVALUE 0 START WITH 0;
