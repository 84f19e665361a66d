-- harel-jobs migration 0004: the message that creates a group lives in the group's row.
--
-- Most jobs have a group of their own (no #[group]): each used to cost a group row AND a
-- message row, both inserted, read and deleted. Now the message that creates a group is
-- stored in the group row ("inline"), and only the messages that arrive while the group
-- exists go to transport_messages. An inline message is always its group's head (it came
-- first), until it is settled; its seq comes from the same sequence as transport_messages'.
-- Rows written before this migration have no inline message and work as before.
ALTER TABLE "harel".transport_groups
    ADD COLUMN inline_seq         BIGINT,
    ADD COLUMN inline_kind        TEXT,
    ADD COLUMN inline_payload     JSON,
    ADD COLUMN inline_enqueued_at TIMESTAMPTZ,
    -- NULL: due at once; otherwise the message may not start before this time
    ADD COLUMN inline_not_before  TIMESTAMPTZ,
    ADD COLUMN inline_last_error  TEXT;

-- Every job in the queue (running, waiting or parked; not the dead letters), wherever it
-- is stored: for tools, tests and people. `attempts` counts the claims of the job's
-- attempts so far.
CREATE VIEW "harel".jobs AS
SELECT m.seq, m.group_id, m.kind, m.payload, m.priority, m.enqueued_at, m.not_before,
       CASE WHEN g.head_seq = m.seq THEN g.head_attempts ELSE m.attempts END AS attempts,
       m.last_error
  FROM "harel".transport_messages m
  LEFT JOIN "harel".transport_groups g ON g.group_id = m.group_id
UNION ALL
SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
       g.inline_enqueued_at, g.inline_not_before,
       CASE WHEN g.head_seq = g.inline_seq THEN g.head_attempts ELSE 0 END,
       g.inline_last_error
  FROM "harel".transport_groups g
 WHERE g.inline_seq IS NOT NULL;
