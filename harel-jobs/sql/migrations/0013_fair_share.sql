-- harel-jobs migration 0013: weighted fair share between fairness keys (tenants) within a
-- queue and a priority level (ADR 0030).
--
-- - A group belongs to a fairness key (`fair_key`, '' for jobs enqueued without one), set by
--   the message that creates the group, as its queue is.
-- - A group row is either *timed* (`fair_tag` NULL: leased, parked, delayed, or due but not
--   tagged yet), ordered by `available_at` in transport_groups_timed, or *ready*
--   (`fair_tag` set: a start tag, `available_at` still the time it became ready), ordered
--   by tag in transport_groups_ready. A claim promotes due timed rows into the ready domain
--   with tags, then leases the lowest tags. A tag is max(V, F) + 100,000 / weight, where V
--   is the level's virtual time (its lowest ready tag, or, with none, the queue's greatest
--   tag started: the sequence fair_v_q<queue>) and F the key's greatest ready tag
--   (transport_groups_ready_by_key), so each key with ready work gets starts in proportion
--   to its weight, whatever the number of groups behind it. Rows written before this
--   migration are all timed: the claims promote them, so nothing here rewrites the table.
-- - The ready domain has a floor per queue (fair_floor_q<queue>, a tag below which only
--   dead entries lie), raised in steps of at least 250 ms (fair_step_q<queue>, the step's
--   time) to the virtual time marked at the step before (fair_mark_q<queue>), or to a
--   level's lowest ready tag if lower: a tag is drawn after its transaction read V, so a
--   transaction shorter than that is never below the floor; a longer one's publisher
--   NOTIFY carries its tag, and housekeeping sweeps the rest. Sequences: outside MVCC, so
--   no old snapshot makes them slower; four per queue (a schema holds up to 1,001 queues,
--   and each sequence is a relation that DROP SCHEMA locks).
-- - `fair_keys`: a key's weight in a queue (1 to 1,000; no row: 1).
--
-- harel_publish takes the keys (p_fair_keys, DEFAULT NULL: the previous release's calls
-- still work) and harel_job and harel_list_jobs return a job's key: new signatures, the old ones dropped here
-- (`migrate` gives every role that could execute an old one the same right on the new).
DROP FUNCTION IF EXISTS @schema@.harel_publish(
    TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[], TEXT[], BIGINT[], TEXT[],
    TEXT[]);
DROP FUNCTION IF EXISTS @schema@.harel_job(BIGINT);
DROP FUNCTION IF EXISTS @schema@.harel_list_jobs(TEXT, TEXT, TEXT, BIGINT, INT, TEXT);
DROP FUNCTION IF EXISTS @schema@.harel_notify(TIMESTAMPTZ);

ALTER TABLE @schema@.transport_groups
    ADD COLUMN fair_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN fair_tag BIGINT;
ALTER TABLE @schema@.dead_letters ADD COLUMN fair_key TEXT NOT NULL DEFAULT '';
ALTER TABLE @schema@.job_history ADD COLUMN fair_key TEXT NOT NULL DEFAULT '';

CREATE TABLE @schema@.fair_keys (
    queue_id   SMALLINT    NOT NULL,
    key        TEXT        NOT NULL,
    weight     INT         NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, key)
);

DROP INDEX @schema@.transport_groups_claimable;
CREATE INDEX transport_groups_timed
    ON @schema@.transport_groups (queue_id, priority, available_at) WHERE fair_tag IS NULL;
CREATE INDEX transport_groups_ready
    ON @schema@.transport_groups (queue_id, priority, fair_tag) WHERE fair_tag IS NOT NULL;
CREATE INDEX transport_groups_ready_by_key
    ON @schema@.transport_groups (queue_id, priority, fair_key, fair_tag)
    WHERE fair_tag IS NOT NULL;

-- every existing queue's sequences (harel_ensure_queue creates a new queue's)
DO $fair$
DECLARE
    q RECORD;
BEGIN
    FOR q IN SELECT id FROM @schema@.queues ORDER BY id LOOP
        EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                       'fair_v_q' || q.id);
        EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                       'fair_floor_q' || q.id);
        EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                       'fair_mark_q' || q.id);
        EXECUTE format('CREATE SEQUENCE @schema@.%I AS BIGINT MINVALUE 0 START WITH 0',
                       'fair_step_q' || q.id);
    END LOOP;
END
$fair$;

-- a job's fairness key, last (CREATE OR REPLACE VIEW keeps the columns before it)
CREATE OR REPLACE VIEW @schema@.jobs AS
SELECT m.seq, m.group_id, m.kind, m.payload, m.priority, m.enqueued_at, m.not_before,
       CASE WHEN g.head_seq = m.seq THEN g.head_attempts ELSE m.attempts END AS attempts,
       m.last_error, q.name AS queue, m.trace_context, g.fair_key
  FROM @schema@.transport_messages m
  LEFT JOIN @schema@.transport_groups g ON g.group_id = m.group_id
  LEFT JOIN @schema@.queues q ON q.id = g.queue_id
UNION ALL
SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
       g.inline_enqueued_at, g.inline_not_before,
       CASE WHEN g.head_seq = g.inline_seq THEN g.head_attempts ELSE 0 END,
       g.inline_last_error, q.name, g.inline_trace_context, g.fair_key
  FROM @schema@.transport_groups g
  LEFT JOIN @schema@.queues q ON q.id = g.queue_id
 WHERE g.inline_seq IS NOT NULL;
