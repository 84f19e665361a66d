-- harel_settle: ends a batch of leases, any mix of outcomes, in one round trip. A worker's
-- entry point (its completer).
--
-- Takes arrays, one element per lease:
--   p_groups, p_seqs, p_tokens  the lease: group, head message, token
--   p_actions   'ack': done, the message goes; 'retain': done, kept in job_history for
--               p_delay_ms; 'dead': failed for good, moved to dead_letters; 'release':
--               given back, the group parked for p_delay_ms (0: claimable at once)
--   p_delay_ms  for 'retain' and 'release': 0 to 100 years
--   p_errors    the error: required for 'dead'; on a release, recorded on the message;
--               at most 16,384 characters kept
--   p_counted   for 'release': false gives the attempt back (a snooze)
--   p_attempts  for 'dead' and 'retain': the attempts to record (NULL: the claims' count)
-- and:
--   p_receipt   the batch's receipt, or NULL: a batch sent again under it (its reply was
--               lost) is answered from it
--   p_forget    the previous batch's receipt, whose reply the caller has: deleted
--   p_worker    the worker pool settling (its id in `workers`), recorded with the attempts
--               that end here (NULL: not said)
-- Returns one row per input, in input order: its seq and 'applied'; 'cancelled' (applied as
--   a cancel: one was asked for while it ran, harel_cancel); 'replayed' (answered from the
--   receipt); or 'lost' (the group is no longer leased to this token at this message:
--   nothing changed).
-- Fence: an input applies only if its group is leased to that token at that message.
--   Applying it ends the lease (the token cleared, or the row gone), so the same input
--   applied again is 'lost'; a batch may hold a stale lease and the current lease of one
--   message. Under a receipt, a second send touches nothing, even while the first is still
--   running (it waits for it). 'ack', 'retain' and 'dead' move the group on: tagged behind
--   its key's ready groups (harel_fair_tags) if it has more messages, deleted if it is
--   drained.
-- Locks: the receipt's row. Fast path: FOR UPDATE SKIP LOCKED on the groups whose input
--   acks their only job (inline; a named group only while it has no message behind it), in
--   no particular order, never waiting. The rest: FOR NO KEY UPDATE of each leased group
--   and of the groups of the dependents its endings resolve (planned within the bound of
--   harel_resolve_dependents), in group order, in one statement, waiting; after that it
--   waits for no group (harel_resolve_dependents skips what another holds). Claims,
--   heartbeats and harel_drop_empty_groups never wait, a publisher's KEY SHARE conflicts
--   with nothing the second phase takes, cancels take theirs in group order: only another
--   settle holding a stale lease on a fast-path group, or a message that arrived in a
--   fast-path group between its probe and its lock, can close a cycle (rare); PostgreSQL
--   aborts one side and the completer resends it under its receipt. See sql/README.md,
--   "Row locks", and ADR 0037.
-- Indexes: transport_groups' key, by `group_id = ANY (array)` (index scans: it runs with
--   enable_seqscan = off) or one lookup per group, rows written by the TID that lookup
--   found; transport_messages' key (group_id, seq), a LATERAL (… OFFSET 0) lookup per
--   message; the keys of settle_receipts, dead_letters and job_history; harel_fair_tags'
--   probes for the groups it moves on; job_dependencies' key and workflow_tasks_by_job, one
--   probe each per batch; job_attempts' key for the attempts that failed.
-- Errors: 22023 for arrays of different lengths, an unknown action, 'dead' without an
--   error, or a period out of range; 40P01 in the rare cycle above.
--
-- Steps:
--   1. Check the arrays and actions.
--   2. Delete p_forget's receipt. Insert p_receipt's (waits for a send still running under
--      it); there already: answer every input from it ('replayed' or 'lost'); done.
--   3. Fast path: lock the groups whose input acks their inline job (no cancel asked for,
--      no unique key) SKIP LOCKED, then delete those still without messages (a new
--      statement: it sees the messages committed before the locks). The rest go on.
--   4. The fence: each remaining input's group FOR NO KEY UPDATE, in group order, where it
--      is leased to the token at the seq (with the groups of the dependents the batch's
--      endings resolve, planned first, when it has any); a cancel asked for makes the
--      action 'cancel'.
--   5. Releases: the group parked for p_delay_ms (timed), its lease ended, the attempt given back
--      if not counted; the error recorded (on the group row for an inline message; on the
--      message, with its attempts, otherwise); a counted attempt with an error recorded in
--      job_attempts (harel_record_attempts).
--   6. Dead: copied into dead_letters with the queue's name and the trace context, the
--      attempt recorded in job_attempts. Retained: copied into job_history as completed,
--      with p_worker.
--   7. The finished messages of transport_messages deleted in one statement; the finished
--      jobs' unique keys released (held on for their period when completed).
--   8. The finished groups moved on, in a new statement that sees the messages committed
--      since the fence: freed (inline message cleared); tagged into the ready domain when
--      their next message is due (harel_fair_tags), else timed until it is; the drained
--      ones to harel_drop_empty_groups.
--   9. The cancelled heads ended (harel_end_cancelled).
--      The jobs completed or dead here that have dependents or are workflow tasks:
--      harel_resolve_dependents (dependents released when no parent is left, cancelled
--      after a failed one; tasks' outcomes recorded).
--      The leases ended in limited queues: their keys' parked groups given back, one per
--      lease (harel_unpark; nothing for queues without a key limit).
--  10. What applied recorded under p_receipt; the outcomes returned.
CREATE OR REPLACE FUNCTION @schema@.harel_settle(
    p_groups   TEXT[],
    p_seqs     BIGINT[],
    p_tokens   UUID[],
    p_actions  TEXT[],
    p_delay_ms BIGINT[],
    p_errors   TEXT[],
    p_counted  BOOLEAN[],
    p_attempts INT[],
    p_receipt  UUID DEFAULT NULL,
    p_forget   UUID DEFAULT NULL,
    p_worker   UUID DEFAULT NULL
) RETURNS TABLE (seq BIGINT, outcome TEXT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
-- every table is reached by key: never a walk comparing each row with a whole array
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now      TIMESTAMPTZ := statement_timestamp();
    v_count    INT := COALESCE(cardinality(p_seqs), 0);
    v_applied  BOOLEAN[];
    v_ords     BIGINT[];
    v_groups   TEXT[];
    v_seqs     BIGINT[];
    v_actions  TEXT[];
    v_delays   BIGINT[];
    v_counted  BOOLEAN[];
    v_attempts INT[];
    v_errors   TEXT[];
    v_inline   BOOLEAN[];
    v_started  TIMESTAMPTZ[];
    v_keys     TEXT[];
    v_keys_held TEXT[];
    v_free_keys TEXT[];
    v_free_seqs BIGINT[];
    v_free_done BOOLEAN[];
    v_cancels  TEXT[];
    v_drained  TEXT[];
    v_next_ctids      TID[];
    v_next_not_before TIMESTAMPTZ[];
    v_next_queues     SMALLINT[];
    v_next_levels     SMALLINT[];
    v_next_keys       TEXT[];
    v_next_tags       BIGINT[];
    v_err_groups   TEXT[];
    v_err_seqs     BIGINT[];
    v_err_attempts INT[];
    v_err_texts    TEXT[];
    v_err_attempt  INT;
    v_err_text     TEXT;
    -- the counted attempts released with an error (job_attempts)
    v_fail_seqs     BIGINT[];
    v_fail_attempts INT[];
    v_fail_started  TIMESTAMPTZ[];
    v_fail_texts    TEXT[];
    v_fast_groups  TEXT[];
    v_fast_ords    BIGINT[];
    v_fast_done    BIGINT[];
    -- the queues and keys of the leases ended in limited queues (harel_unpark)
    v_ended_queues SMALLINT[];
    v_ended_keys   TEXT[];
    v_more_queues  SMALLINT[];
    v_more_keys    TEXT[];
    -- the jobs that ended here, and how (harel_resolve_dependents)
    v_done_seqs     BIGINT[];
    v_done_outcomes TEXT[];
    -- the groups of the dependents they release or cancel, locked with the fence's
    v_dep_groups    TEXT[];
BEGIN
    IF COALESCE(cardinality(p_groups), 0) <> v_count
       OR COALESCE(cardinality(p_tokens), 0) <> v_count
       OR COALESCE(cardinality(p_actions), 0) <> v_count
       OR COALESCE(cardinality(p_delay_ms), 0) <> v_count
       OR COALESCE(cardinality(p_errors), 0) <> v_count
       OR COALESCE(cardinality(p_counted), 0) <> v_count
       OR COALESCE(cardinality(p_attempts), 0) <> v_count THEN
        RAISE EXCEPTION 'harel_settle: the eight arrays must have one element per lease'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_actions, p_delay_ms, p_errors)
                             AS x(action, delay_ms, error)
                WHERE x.action IS NULL
                   OR x.action NOT IN ('ack', 'retain', 'dead', 'release')
                   OR (x.action = 'dead' AND x.error IS NULL)
                   OR (x.action IN ('release', 'retain')
                       AND (x.delay_ms IS NULL OR x.delay_ms NOT BETWEEN 0 AND 3155760000000))) THEN
        RAISE EXCEPTION 'harel_settle: actions are ack, retain or release (with a period of 0 to 100 years) or dead (with an error)'
            USING ERRCODE = '22023';
    END IF;

    IF p_forget IS NOT NULL THEN
        DELETE FROM @schema@.settle_receipts r WHERE r.receipt = p_forget;
    END IF;
    -- Claim the receipt first: a send of the same batch still running holds it, and this
    -- insert waits for that one to end. If it committed, the receipt is there: answer from
    -- it, touching nothing.
    IF p_receipt IS NOT NULL THEN
        INSERT INTO @schema@.settle_receipts (receipt, applied)
        VALUES (p_receipt, '{}')
        ON CONFLICT (receipt) DO NOTHING;
        IF NOT FOUND THEN
            SELECT r.applied INTO v_applied FROM @schema@.settle_receipts r
             WHERE r.receipt = p_receipt;
            RETURN QUERY
            SELECT x.seq, CASE WHEN x.applied THEN 'replayed' ELSE 'lost' END
              FROM unnest(p_seqs, v_applied) WITH ORDINALITY AS x(seq, applied, ord)
             ORDER BY x.ord;
            RETURN;
        END IF;
    END IF;

    -- The fast path: an ack of a group's inline message (its only job, the common case of
    -- a job without a group) deletes the group row under FOR UPDATE SKIP LOCKED, taken as
    -- the fence itself: one lock and one delete, where the path below takes a lock, a
    -- stronger one and the delete, in four statements. SKIP LOCKED: a publisher adding to
    -- the group holds KEY SHARE (its message is not visible yet), a heartbeat or another
    -- settle may hold the row; those go the path below. The emptiness is checked in a new
    -- statement after the lock, whose snapshot sees every message committed before it was
    -- granted (as in harel_drop_empty_groups); a group found not empty goes the path below
    -- too, under the lock it already has.
    --
    -- These locks are not taken in group order, and the path below then waits for its own
    -- in group order: nobody may wait for a row locked here while holding one the path
    -- below wants. Claims, the heartbeat (harel_extend) and harel_drop_empty_groups never
    -- wait (SKIP LOCKED); a publisher's KEY SHARE conflicts with nothing the path below
    -- takes; a cancel locks one group. Only another settle holding a stale lease on one of
    -- these groups and a row in common could: PostgreSQL then breaks the cycle, and the
    -- completer sends that batch again under its receipt.
    SELECT array_agg(f.group_id), array_agg(f.ord) INTO v_fast_groups, v_fast_ords
      FROM unnest(p_groups, p_seqs, p_tokens, p_actions)
           WITH ORDINALITY AS x(group_id, seq, token, action, ord)
     CROSS JOIN LATERAL (SELECT g.group_id, x.ord FROM @schema@.transport_groups g
                          WHERE g.group_id = x.group_id AND g.locked_by = x.token
                            AND g.head_seq = x.seq AND g.inline_seq = x.seq
                            AND g.inline_unique_key IS NULL
                            AND g.cancel_requested_at IS NULL
                            -- (a named group with messages behind its inline job goes the
                            -- path below at once: locked here, out of order, it could be
                            -- one a settle releasing into it waits for while we wait for
                            -- that settle's groups in the fence; a group of its own holds
                            -- only its job)
                            AND (g.group_id = 'own:' || lpad(x.seq::text, 19, '0')
                                 OR (SELECT m.seq FROM @schema@.transport_messages m
                                      WHERE m.group_id = g.group_id LIMIT 1) IS NULL)
                            FOR UPDATE SKIP LOCKED) AS f
     WHERE x.action = 'ack';
    IF v_fast_groups IS NOT NULL THEN
        WITH gone AS (
            DELETE FROM @schema@.transport_groups g
             WHERE g.group_id = ANY (v_fast_groups)
               -- a subquery per group, not NOT EXISTS (see harel_drop_empty_groups)
               AND (SELECT m.seq FROM @schema@.transport_messages m
                     WHERE m.group_id = g.group_id LIMIT 1) IS NULL
            RETURNING g.group_id, g.queue_id, g.fair_key, g.limited_queue
        )
        SELECT array_agg(f.ord),
               array_agg(gone.queue_id) FILTER (WHERE gone.limited_queue IS NOT NULL),
               array_agg(gone.fair_key) FILTER (WHERE gone.limited_queue IS NOT NULL)
          INTO v_fast_done, v_ended_queues, v_ended_keys
          FROM gone
          JOIN unnest(v_fast_groups, v_fast_ords) AS f(group_id, ord)
            ON f.group_id = gone.group_id;
    END IF;

    -- The groups of the dependents that this batch's endings release or cancel (ADR 0037),
    -- planned by harel_resolve_dependents within its bound, locked with the batch's own
    -- leased groups in one statement, in group order: every transaction that waits for
    -- groups takes them so (the fence below, harel_extend, a cancel), so no two wait for
    -- each other in a cycle, and the resolution after the fence finds them held (it never
    -- waits: what it cannot lock goes to housekeeping). Only once the schema held a
    -- dependency, and only for a batch whose jobs have dependents: one probe.
    -- (the sequence tested on its own, and the plan asked for in a statement that reads no
    -- table: on Citus a statement that reads the schema's tables runs on the worker node)
    IF pg_sequence_last_value('@schema@.dependents_seen'::regclass) IS NOT NULL
       AND EXISTS (SELECT 1 FROM @schema@.job_dependencies d WHERE d.parent_id = ANY (p_seqs)) THEN
        SELECT array_agg(x.seq), array_agg(CASE x.action WHEN 'dead' THEN 'dead'
                                                        ELSE 'completed' END)
          INTO v_done_seqs, v_done_outcomes
          FROM unnest(p_seqs, p_actions) AS x(seq, action)
         WHERE x.action IN ('ack', 'retain', 'dead');
        v_dep_groups := ARRAY(SELECT @schema@.harel_resolve_dependents(
                                  v_done_seqs, v_done_outcomes, p_plan => true));
        IF cardinality(v_dep_groups) > 0 THEN
            PERFORM 1 FROM @schema@.transport_groups g
             WHERE g.group_id = ANY (v_dep_groups || p_groups)
               AND (g.group_id = ANY (v_dep_groups)
                    -- (a batch's group only where it is leased to it, as the fence has it)
                    OR (g.group_id, g.locked_by, g.head_seq) IN (
                           SELECT x.group_id, x.token, x.seq
                             FROM unnest(p_groups, p_tokens, p_seqs) AS x(group_id, token, seq)))
             ORDER BY g.group_id
               FOR NO KEY UPDATE;
        END IF;
    END IF;

    -- The fence, and the row locks we need to move the groups on (in group order, as
    -- harel_extend takes them: no deadlock between a batch and a heartbeat).
    --
    -- Every statement here reaches the queue tables by key: `group_id = ANY (array)` on
    -- transport_groups (an index scan: this function runs with enable_seqscan off, as on a
    -- small table the planner walked the table comparing each row with the whole array);
    -- on transport_messages, a LATERAL (… OFFSET 0) lookup per (group, seq) (OFFSET 0 keeps
    -- the planner from flattening it into a join it may reorder), and writes by the TID
    -- that lookup found. A join condition alone is not enough: after a VACUUM that an old
    -- snapshot kept from removing anything, the statistics say the tables are nearly
    -- empty, and the planner then walks a whole index (every dead entry) rather than look
    -- rows up. Seen: 84,000 buffers per settle in the horizon benchmark, and
    -- tests/transport_env.rs.
    SELECT array_agg(f.ord), array_agg(f.group_id), array_agg(f.seq), array_agg(f.action),
           array_agg(f.delay_ms), array_agg(f.counted), array_agg(f.attempts),
           array_agg(left(f.error, 16384)), array_agg(f.inline), array_agg(f.started),
           array_agg(f.unique_key), array_agg(f.unique_key) FILTER (WHERE f.unique_key IS NOT NULL),
           array_agg(f.group_id) FILTER (WHERE f.action = 'cancel'),
           array_agg(f.queue_id) FILTER (WHERE f.limited),
           array_agg(f.fair_key) FILTER (WHERE f.limited)
      INTO v_ords, v_groups, v_seqs, v_actions, v_delays, v_counted, v_attempts, v_errors,
           v_inline, v_started, v_keys, v_keys_held, v_cancels, v_more_queues, v_more_keys
      FROM (SELECT x.ord, g.group_id, x.seq,
                   CASE WHEN g.cancel_requested_at IS NOT NULL THEN 'cancel'
                        ELSE x.action END AS action,
                   x.delay_ms, x.counted,
                   COALESCE(x.attempts, g.head_attempts) AS attempts, x.error,
                   g.inline_seq IS NOT DISTINCT FROM x.seq AS inline,
                   g.head_started_at AS started,
                   CASE WHEN g.inline_seq IS NOT DISTINCT FROM x.seq
                        THEN g.inline_unique_key END AS unique_key,
                   g.queue_id, g.fair_key, g.limited_queue IS NOT NULL AS limited
              FROM unnest(p_groups, p_seqs, p_tokens, p_actions, p_delay_ms, p_counted,
                          p_errors, p_attempts)
                   WITH ORDINALITY AS x(group_id, seq, token, action, delay_ms, counted, error,
                                        attempts, ord)
              JOIN @schema@.transport_groups g
                ON g.group_id = x.group_id AND g.locked_by = x.token AND g.head_seq = x.seq
             WHERE g.group_id = ANY (p_groups)
             ORDER BY g.group_id
               FOR NO KEY UPDATE OF g) AS f;

    IF v_ords IS NOT NULL THEN
        -- Released: the group waits (or not), its lease ended; the attempt count stays with
        -- the group's head, and with the message when an error is recorded (so it survives
        -- the message being displaced as head; an inline message never is).
        WITH released AS (
            UPDATE @schema@.transport_groups g
               SET locked_by         = NULL,
                   -- (in UTC, timestamp + interval: immutable, as Citus requires of a
                   -- function given a column in an UPDATE; the same instant)
                   available_at      = ((v_now AT TIME ZONE 'UTC')
                                        + f.delay_ms * interval '1 millisecond')
                                       AT TIME ZONE 'UTC',
                   fair_tag          = NULL,
                   head_attempts     = g.head_attempts
                                       - CASE WHEN COALESCE(f.counted, true) THEN 0 ELSE 1 END,
                   inline_last_error = CASE WHEN f.inline AND f.error IS NOT NULL THEN f.error
                                            ELSE g.inline_last_error END
              FROM unnest(v_groups, v_actions, v_delays, v_counted, v_errors, v_inline)
                   AS f(group_id, action, delay_ms, counted, error, inline)
             -- each row by its key, then by the TID of the version that lookup found (the
             -- one the fence above locked: nobody else can have changed it since). Joined
             -- on `group_id = ANY (v_groups)` instead, the planner sometimes looked the
             -- whole array up once per released row, after an analyze mid-batch.
             CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid FROM @schema@.transport_groups t
                                  WHERE t.group_id = f.group_id
                                 OFFSET 0) AS k
             WHERE f.action = 'release' AND g.ctid = k.row_ctid
            RETURNING g.group_id, g.head_seq, g.head_attempts, g.head_started_at, f.error,
                      f.inline, COALESCE(f.counted, true) AS counted
        )
        SELECT array_agg(r.group_id) FILTER (WHERE NOT r.inline),
               array_agg(r.head_seq) FILTER (WHERE NOT r.inline),
               array_agg(r.head_attempts) FILTER (WHERE NOT r.inline),
               array_agg(r.error) FILTER (WHERE NOT r.inline),
               array_agg(r.head_seq) FILTER (WHERE r.counted),
               array_agg(r.head_attempts) FILTER (WHERE r.counted),
               array_agg(r.head_started_at) FILTER (WHERE r.counted),
               array_agg(r.error) FILTER (WHERE r.counted)
          INTO v_err_groups, v_err_seqs, v_err_attempts, v_err_texts,
               v_fail_seqs, v_fail_attempts, v_fail_started, v_fail_texts
          FROM released r
         WHERE r.error IS NOT NULL;
        IF v_fail_seqs IS NOT NULL THEN
            PERFORM @schema@.harel_record_attempts(
                v_fail_seqs, v_fail_attempts, v_fail_started,
                array_fill('failed'::text, ARRAY[cardinality(v_fail_seqs)]), v_fail_texts,
                v_now, p_worker);
        END IF;
        FOR i IN 1..COALESCE(cardinality(v_err_groups), 0) LOOP
            -- (scalar variables: an UPDATE that sets a column from a subscripted PL/pgSQL
            -- array crashed the Citus coordinator, signal 11)
            v_err_attempt := v_err_attempts[i];
            v_err_text := v_err_texts[i];
            UPDATE @schema@.transport_messages m
               SET attempts = v_err_attempt, last_error = v_err_text
             WHERE m.group_id = v_err_groups[i] AND m.seq = v_err_seqs[i];
        END LOOP;

        -- Finished: the dead ones copied into dead_letters (an inline message from its group
        -- row), then the others deleted from transport_messages (an inline message goes with
        -- its group row's update or delete below). Each statement walks the arrays once and
        -- looks rows up by key: linear in the batch.
        IF 'dead' = ANY (v_actions) THEN
            -- (failed_at given, its default's now(), and every column in the table's
            -- order: Citus sends the worker node an INSERT … SELECT … UNION ALL with the
            -- defaulted columns added to the list and no value for them, and with the list
            -- in the table's order but the SELECT's columns in ours)
            INSERT INTO @schema@.dead_letters
                   (id, group_id, kind, payload, priority, attempts, last_error, enqueued_at,
                    failed_at, queue, trace_context, fair_key)
            SELECT m.seq, m.group_id, m.kind, m.payload, m.priority, d.attempts, d.error,
                   m.enqueued_at, now(),
                   (SELECT qs.name FROM @schema@.queues qs WHERE qs.id = gq.queue_id),
                   m.trace_context, gq.fair_key
              FROM unnest(v_groups, v_seqs, v_actions, v_attempts, v_errors, v_inline)
                   AS d(group_id, seq, action, attempts, error, inline)
             CROSS JOIN LATERAL (SELECT t.* FROM @schema@.transport_messages t
                                  WHERE t.group_id = d.group_id AND t.seq = d.seq
                                 OFFSET 0) AS m
             -- the group's row by its key (the whole row: asked for one column, the
             -- planner may walk another index for it)
             CROSS JOIN LATERAL (SELECT t.* FROM @schema@.transport_groups t
                                  WHERE t.group_id = d.group_id
                                 OFFSET 0) AS gq
             WHERE d.action = 'dead' AND NOT d.inline
            UNION ALL
            SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
                   d.attempts, d.error, g.inline_enqueued_at, now(),
                   (SELECT qs.name FROM @schema@.queues qs WHERE qs.id = g.queue_id),
                   g.inline_trace_context, g.fair_key
              FROM unnest(v_groups, v_actions, v_attempts, v_errors, v_inline)
                   AS d(group_id, action, attempts, error, inline)
             CROSS JOIN LATERAL (SELECT t.* FROM @schema@.transport_groups t
                                  WHERE t.group_id = d.group_id
                                 OFFSET 0) AS g
             WHERE d.action = 'dead' AND d.inline;
            -- the attempt that died; a job given up on by a claim that found it out of
            -- attempts (p_attempts given: the handler did not run) marks its last attempt
            -- dead, without this claim's start or worker
            PERFORM @schema@.harel_record_attempts(
                array_agg(d.seq), array_agg(d.attempts),
                array_agg(d.started),
                array_agg('dead'::text), array_agg(d.error), v_now, p_worker)
              FROM unnest(v_seqs, v_actions, v_attempts, v_errors, v_started, v_ords)
                   AS d(seq, action, attempts, error, started, ord)
             WHERE d.action = 'dead' AND p_attempts[d.ord::int] IS NULL;
            PERFORM @schema@.harel_record_attempts(
                array_agg(d.seq), array_agg(d.attempts), array_agg(NULL::timestamptz),
                array_agg('dead'::text), array_agg(d.error), v_now, NULL)
              FROM unnest(v_seqs, v_actions, v_attempts, v_errors, v_ords)
                   AS d(seq, action, attempts, error, ord)
             WHERE d.action = 'dead' AND p_attempts[d.ord::int] IS NOT NULL;
        END IF;
        IF 'retain' = ANY (v_actions) THEN
            INSERT INTO @schema@.job_history
                   (id, group_id, kind, payload, priority, state, attempts, last_error,
                    enqueued_at, started_at, finished_at, keep_until, queue, fair_key, worker)
            SELECT m.seq, m.group_id, m.kind, m.payload, m.priority, 'completed', d.attempts,
                   m.last_error, m.enqueued_at, d.started, v_now,
                   ((v_now AT TIME ZONE 'UTC') + d.delay_ms * interval '1 millisecond')
                   AT TIME ZONE 'UTC',
                   (SELECT qs.name FROM @schema@.queues qs WHERE qs.id = gq.queue_id),
                   gq.fair_key, p_worker
              FROM unnest(v_groups, v_seqs, v_actions, v_attempts, v_delays, v_started, v_inline)
                   AS d(group_id, seq, action, attempts, delay_ms, started, inline)
             CROSS JOIN LATERAL (SELECT t.* FROM @schema@.transport_messages t
                                  WHERE t.group_id = d.group_id AND t.seq = d.seq
                                 OFFSET 0) AS m
             -- the group's row by its key (the whole row: asked for one column, the
             -- planner may walk another index for it)
             CROSS JOIN LATERAL (SELECT t.* FROM @schema@.transport_groups t
                                  WHERE t.group_id = d.group_id
                                 OFFSET 0) AS gq
             WHERE d.action = 'retain' AND NOT d.inline
            UNION ALL
            SELECT g.inline_seq, g.group_id, g.inline_kind, g.inline_payload, g.priority,
                   'completed', d.attempts, g.inline_last_error, g.inline_enqueued_at, d.started,
                   v_now,
                   ((v_now AT TIME ZONE 'UTC') + d.delay_ms * interval '1 millisecond')
                   AT TIME ZONE 'UTC',
                   (SELECT qs.name FROM @schema@.queues qs WHERE qs.id = g.queue_id), g.fair_key,
                   p_worker
              FROM unnest(v_groups, v_actions, v_attempts, v_delays, v_started, v_inline)
                   AS d(group_id, action, attempts, delay_ms, started, inline)
             -- one lookup by key per row (a join with `group_id = ANY (v_groups)` looked the
             -- whole batch up once per row: retained drains ran five times slower)
             CROSS JOIN LATERAL (SELECT t.* FROM @schema@.transport_groups t
                                  WHERE t.group_id = d.group_id
                                 OFFSET 0) AS g
             WHERE d.action = 'retain' AND d.inline
            ON CONFLICT (id) DO NOTHING;
        END IF;
        -- A finished message leaves transport_messages (an inline one goes with its group
        -- row's update or delete below), and frees its unique key if it held one; nothing
        -- to do per message for the common batch, inline and without keys. One statement
        -- for the batch: each message by the TID of the version a key lookup found (its
        -- group is locked by us since the fence, and nothing else writes a leased head),
        -- where a statement per message cost 256 executions per batch of grouped jobs.
        IF NOT (true = ALL (v_inline) AND v_keys_held IS NULL) THEN
            WITH gone AS (
                DELETE FROM @schema@.transport_messages m
                 USING unnest(v_groups, v_seqs, v_actions, v_inline)
                       WITH ORDINALITY AS d(group_id, seq, action, inline, i)
                 CROSS JOIN LATERAL (SELECT t.ctid AS row_ctid
                                       FROM @schema@.transport_messages t
                                      WHERE t.group_id = d.group_id AND t.seq = d.seq
                                     OFFSET 0) AS k
                 WHERE d.action IN ('ack', 'retain', 'dead') AND NOT d.inline
                   AND m.ctid = k.row_ctid
                RETURNING d.i, m.unique_key
            )
            SELECT array_agg(r.unique_key ORDER BY r.i), array_agg(v_seqs[r.i] ORDER BY r.i),
                   array_agg(v_actions[r.i] <> 'dead' ORDER BY r.i)
              INTO v_free_keys, v_free_seqs, v_free_done
              FROM (SELECT g.i, g.unique_key FROM gone g
                    UNION ALL
                    SELECT x.i, v_keys[x.i]
                      FROM generate_subscripts(v_groups, 1) AS x(i)
                     WHERE v_inline[x.i] AND v_actions[x.i] IN ('ack', 'retain', 'dead')) AS r
             WHERE r.unique_key IS NOT NULL;
            FOR i IN 1..COALESCE(cardinality(v_free_keys), 0) LOOP
                PERFORM @schema@.harel_release_key(v_free_keys[i], v_free_seqs[i], v_free_done[i]);
            END LOOP;
        END IF;

        -- Move the finished groups on (an inline message ends here). A new statement: its
        -- snapshot sees messages committed since the fence.
        SELECT array_agg(nh.group_id) FILTER (WHERE NOT nh.has_next),
               array_agg(nh.row_ctid) FILTER (WHERE nh.has_next),
               array_agg(nh.not_before) FILTER (WHERE nh.has_next),
               array_agg(nh.queue_id) FILTER (WHERE nh.has_next),
               array_agg(nh.priority) FILTER (WHERE nh.has_next),
               -- (a NULL key for a group whose next message is not due: not tagged)
               array_agg(CASE WHEN nh.not_before IS NULL OR nh.not_before <= v_now
                              THEN nh.fair_key END) FILTER (WHERE nh.has_next)
          INTO v_drained, v_next_ctids, v_next_not_before, v_next_queues, v_next_levels,
               v_next_keys
          FROM (SELECT f.group_id, n.not_before, n.seq IS NOT NULL AS has_next, r.row_ctid,
                       r.queue_id, r.priority, r.fair_key
                  FROM unnest(v_groups, v_actions) AS f(group_id, action)
                 -- the group row's current version (locked by us since the fence): one
                 -- lookup by key per group, so that the update below is a TID lookup per
                 -- row, not a join of the batch against itself (a nested loop that compared
                 -- each of 256 groups with the others: 32,640 rows filtered, 2.6 ms)
                 CROSS JOIN LATERAL (SELECT g.ctid AS row_ctid, g.queue_id, g.priority,
                                            g.fair_key
                                       FROM @schema@.transport_groups g
                                      WHERE g.group_id = f.group_id
                                     OFFSET 0) AS r
                  -- the group's next message: the first of its range of the key (the row
                  -- comparison is a condition of that key alone: with `group_id =` and
                  -- `ORDER BY seq` only, the planner walked transport_messages_by_id, in
                  -- seq order too, under statistics a vacuum left stale)
                  LEFT JOIN LATERAL (
                        SELECT m.seq, m.not_before
                          FROM @schema@.transport_messages m
                         WHERE m.group_id = f.group_id
                           AND (m.group_id, m.seq) > (f.group_id, 0)
                         ORDER BY m.group_id, m.seq
                         LIMIT 1) AS n ON true
                 WHERE f.action IN ('ack', 'retain', 'dead')) AS nh;

        IF v_next_ctids IS NOT NULL THEN
            -- a group whose next message is due goes behind its key's ready groups
            IF array_position(v_next_keys, NULL) IS NULL
               OR cardinality(array_positions(v_next_keys, NULL)) < cardinality(v_next_keys) THEN
                v_next_tags := @schema@.harel_fair_tags(v_next_queues, v_next_levels,
                                                        v_next_keys);
            END IF;
            UPDATE @schema@.transport_groups g
               SET locked_by = NULL, head_seq = NULL, head_attempts = 0, head_started_at = NULL,
                   available_at = GREATEST(v_now, x.not_before),
                   fair_tag = CASE WHEN x.fair_key IS NOT NULL THEN x.tag END,
                   inline_seq = NULL, inline_kind = NULL, inline_payload = NULL,
                   inline_enqueued_at = NULL, inline_not_before = NULL, inline_last_error = NULL,
                   inline_unique_key = NULL, inline_trace_context = NULL
              FROM unnest(v_next_ctids, v_next_not_before, v_next_keys, v_next_tags)
                   AS x(row_ctid, not_before, fair_key, tag)
             WHERE g.ctid = x.row_ctid;
        END IF;

        IF v_drained IS NOT NULL THEN
            PERFORM @schema@.harel_drop_empty_groups(v_drained, 200);
        END IF;

        IF v_cancels IS NOT NULL THEN
            PERFORM @schema@.harel_end_cancelled(v_cancels);
        END IF;
    END IF;

    -- The jobs that ended here (completed, dead) release or cancel the jobs that wait for
    -- them, in this transaction, and workflow tasks record their outcomes (ADR 0033; the
    -- cancelled ones did in harel_end_cancelled). Once the schema has held a dependency or
    -- a workflow (dependents_seen, read outside MVCC), one probe of job_dependencies' key
    -- and one of workflow_tasks_by_job for the batch; before, nothing.
    -- (the sequence tested on its own: on Citus a statement that reads the schema's
    -- tables runs on the worker node, where the schema's sequences do not exist)
    IF pg_sequence_last_value('@schema@.dependents_seen'::regclass) IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM @schema@.job_dependencies d WHERE d.parent_id = ANY (p_seqs))
           OR EXISTS (SELECT 1 FROM @schema@.workflow_tasks w
                       WHERE w.job_id = ANY (p_seqs)) THEN
            SELECT array_agg(e.seq), array_agg(e.outcome) INTO v_done_seqs, v_done_outcomes
              FROM (SELECT p_seqs[f.ord] AS seq, 'completed' AS outcome
                      FROM unnest(v_fast_done) AS f(ord)
                    UNION ALL
                    SELECT x.seq, CASE x.action WHEN 'dead' THEN 'dead' ELSE 'completed' END
                      FROM unnest(v_seqs, v_actions) AS x(seq, action)
                     WHERE x.action IN ('ack', 'retain', 'dead')) AS e;
            IF v_done_seqs IS NOT NULL THEN
                PERFORM @schema@.harel_resolve_dependents(v_done_seqs, v_done_outcomes);
            END IF;
        END IF;
    END IF;

    -- a key-limited queue's keys get parked groups back, one per lease ended
    IF v_ended_queues IS NOT NULL OR v_more_queues IS NOT NULL THEN
        PERFORM @schema@.harel_unpark(v_ended_queues || v_more_queues,
                                      v_ended_keys || v_more_keys);
    END IF;

    SELECT array_agg(a.ord IS NOT NULL ORDER BY x.ord) INTO v_applied
      FROM generate_series(1, v_count) AS x(ord)
      LEFT JOIN unnest(v_ords || v_fast_done) AS a(ord) ON a.ord = x.ord;
    IF p_receipt IS NOT NULL THEN
        UPDATE @schema@.settle_receipts r SET applied = COALESCE(v_applied, '{}')
         WHERE r.receipt = p_receipt;
    END IF;

    RETURN QUERY
    SELECT x.seq, CASE WHEN NOT x.applied THEN 'lost'
                       WHEN v_cancels IS NOT NULL
                            AND v_actions[array_position(v_ords, x.ord)] = 'cancel'
                            THEN 'cancelled'
                       ELSE 'applied' END
      FROM unnest(p_seqs, v_applied) WITH ORDINALITY AS x(seq, applied, ord)
     ORDER BY x.ord;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_settle(
    TEXT[], BIGINT[], UUID[], TEXT[], BIGINT[], TEXT[], BOOLEAN[], INT[], UUID, UUID, UUID)
    FROM PUBLIC;
