-- harel-jobs migration 0012: the view `jobs` shows each job's queue and trace context.
--
-- The operators' grant (README, "Database roles") includes SELECT on `jobs`, which showed
-- neither. `queue` is the name of the queue of the job's group: a message of
-- transport_messages has no queue of its own, its group's applies. The view reads `queues`
-- with its owner's rights, so a reader needs no right on that table. `trace_context` is the
-- message's, or the group row's for its inline message. CREATE OR REPLACE VIEW keeps the
-- existing columns in their order (new ones can only come last) and the grants on the view.
CREATE OR REPLACE VIEW @schema@.jobs AS
SELECT m.seq, m.group_id, m.kind, m.payload, m.priority, m.enqueued_at, m.not_before,
       CASE WHEN g.head_seq = m.seq THEN g.head_attempts ELSE m.attempts END AS attempts,
       m.last_error, q.name AS queue, m.trace_context
  FROM @schema@.transport_messages m
  LEFT JOIN @schema@.transport_groups g ON g.group_id = m.group_id
  LEFT JOIN @schema@.queues q ON q.id = g.queue_id
UNION ALL
SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
       g.inline_enqueued_at, g.inline_not_before,
       CASE WHEN g.head_seq = g.inline_seq THEN g.head_attempts ELSE 0 END,
       g.inline_last_error, q.name, g.inline_trace_context
  FROM @schema@.transport_groups g
  LEFT JOIN @schema@.queues q ON q.id = g.queue_id
 WHERE g.inline_seq IS NOT NULL;
