-- harel-jobs migration 0009: a job's trace context, so that a trace runs from the span that
-- enqueued a job to the span of each of its attempts (feature `opentelemetry`).
--
-- One nullable TEXT per place a queued job lives: the message row, the inline first message
-- of a group row (migration 0004), and the dead letter (which `DeadLetters::retry` publishes
-- again with it). It holds a W3C `traceparent` (55 characters), then, if the trace has one,
-- a line feed and its `tracestate`: at most 1,024 bytes, checked by harel_publish (which
-- stores NULL for anything else). NULL for every job enqueued without a sampled span, and
-- for every job of a producer built without the feature: a NULL column costs a bit in the
-- row's null bitmap, and adding one rewrites nothing (no default).
--
-- harel_publish takes one more array (p_trace_contexts, DEFAULT NULL: the calls of the
-- previous release still work) and harel_claim returns one more column: new signatures,
-- so the old ones are dropped here (`migrate` gives every role that could execute an old
-- one the same right on the new).
DROP FUNCTION IF EXISTS @schema@.harel_publish(
    TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[], TEXT[], BIGINT[], TEXT[]);
DROP FUNCTION IF EXISTS @schema@.harel_claim(UUID, BIGINT, INT, INT, BIGINT, TEXT);

ALTER TABLE @schema@.transport_messages ADD COLUMN trace_context TEXT;
ALTER TABLE @schema@.transport_groups ADD COLUMN inline_trace_context TEXT;
ALTER TABLE @schema@.dead_letters ADD COLUMN trace_context TEXT;
