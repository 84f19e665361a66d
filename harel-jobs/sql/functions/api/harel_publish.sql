-- harel_publish: enqueues messages (jobs) and makes sure each of their groups has a row.
-- The producer's entry point, and all a producer may call: it checks every message itself,
-- so a role that can execute it cannot write anything the Rust side would refuse
-- (transport/message.rs states the same limits).
--
-- Takes arrays, one element per message, so that a batch is one round trip:
--   p_groups          the group id, 1 to 1,024 bytes. NULL: a group of its own, named
--                     'own:' and the message's seq in 19 digits (transport::own_group in
--                     Rust). Such names are reserved: a caller's id of that form is taken
--                     as NULL, so no producer can take another job's group or name.
--   p_kinds           the job's kind, 1 to 255 bytes
--   p_payloads        its payload, JSON text of at most 4 MiB
--   p_priorities      0 to 4
--   p_not_before      the time it may start (finite), or NULL
--   p_delay_ms        otherwise a delay from now, 0 to 100 years, or NULL: due at once
--   p_unique_keys     NULL, or per message a unique key of 1 to 1,024 bytes, or NULL
--   p_unique_hold_ms  per key, how long it stays held after its job completed (0 to 100
--                     years; NULL: free once the job leaves the queue)
--   p_queues          NULL, or per message its queue's name (NULL: 'default')
--   p_trace_contexts  NULL, or per message a W3C traceparent, optionally a line feed and
--                     its tracestate, at most 1,024 bytes; anything else is stored as NULL
--                     (tracing never refuses a job)
--   p_fair_keys       NULL, or per message its fairness key, 0 to 255 bytes (NULL or '':
--                     the shared key of jobs without one)
--   p_after_of, p_after
--                     NULL, or one element per dependency (ADR 0033): the message that
--                     waits (its position in the call, from 1) and what it waits for: a
--                     job id, or -n for the call's n-th message (an earlier one). A job id
--                     must be below every seq the call draws (the call's own messages are
--                     named by position), so every dependency points to an older job and
--                     none can close a cycle.
--   p_run_after_failure
--                     NULL, or per message: true runs it once its parents have all ended,
--                     whatever their outcomes; false or NULL cancels it when one of them
--                     becomes a dead letter or is cancelled
-- Returns one row per message, in input order: its seq (the job's id, drawn in input
--   order, so a group's messages keep their order), or, for a duplicate of a unique job,
--   the id of the job holding the key, negated: nothing is written for it (a dependency on
--   it waits for the holder instead).
-- Fence: a message whose unique key is held is a duplicate (harel_take_key); within a
--   batch, the first message with a key takes it and the later ones are its duplicates.
--   A group belongs to the queue and the fairness key of the message that created it (a
--   later message's key is not the group's).
-- Locks: KEY SHARE on each existing group row it adds to, in group order, until commit, so
--   that a settle draining the group cannot delete the row under a message it cannot see
--   yet (it frees the row instead: harel_drop_empty_groups); claims, settles and
--   heartbeats take non-key locks, which do not conflict. It waits for a transaction that
--   deletes such a row or holds it FOR UPDATE, then inserts the row again. Unique keys
--   are taken in key order and new queues created in name order: concurrent batches never
--   wait for each other in a cycle.
-- Indexes: transport_groups' key; transport_messages' identity sequence for every seq;
--   harel_fair_tags' probes for the groups it creates due now.
-- Errors: 22023 for arrays of different lengths or a message outside the limits; HJ001
--   for a message into an existing group of another queue, or a batch that puts one new
--   group in two queues; harel_ensure_queue's, harel_take_key's and harel_hold's (HJ002: a
--   parent that is neither queued nor kept).
--
-- Steps:
--   1. Check the arrays and every message; reserved group names become NULL, malformed
--      trace contexts NULL.
--   2. One message (the common enqueue): the steps below with scalar statements: its
--      queue, its seq and group name, its unique key; then the group row with the message
--      inline (tagged into the ready domain when due: harel_fair_tags), or, the group
--      existing, KEY SHARE on it, its queue checked, and the message
--      into transport_messages.
--   3. A batch: every seq in input order, and each group of its own named after its seq.
--   4. Each named queue looked up or created once, in name order.
--   5. Unique keys taken in key order; duplicates dropped from the arrays.
--   6. The tags of the groups the batch creates due now (harel_fair_tags: one call).
--      Only messages without a group (the bulk load): their group rows by one plain
--      INSERT, each message inline. Otherwise, each group's first message of the batch
--      creates its row with the message inline, in group order (ON CONFLICT DO NOTHING);
--      the existing rows are KEY SHARE-locked and their queue checked, and a row deleted
--      between the two statements is inserted in the next round; then every other message
--      goes to transport_messages.
--   7. Messages that wait for parents: held (harel_hold: their parents looked up and
--      locked, what they wait for recorded, the ended parents resolved at once).
--   8. Messages due now: harel_notify, with the lowest new tag as the position.
--   (A message with parents is inserted not before the pending time, 9999-12-31, its own
--   start time kept aside for its release: it is never due here.)
CREATE OR REPLACE FUNCTION @schema@.harel_publish(
    p_groups      TEXT[],
    p_kinds       TEXT[],
    p_payloads    TEXT[],
    p_priorities  SMALLINT[],
    p_not_before  TIMESTAMPTZ[],
    p_delay_ms    BIGINT[],
    p_unique_keys    TEXT[] DEFAULT NULL,
    p_unique_hold_ms BIGINT[] DEFAULT NULL,
    p_queues         TEXT[] DEFAULT NULL,
    p_trace_contexts TEXT[] DEFAULT NULL,
    p_fair_keys      TEXT[] DEFAULT NULL,
    p_after_of       INT[] DEFAULT NULL,
    p_after          BIGINT[] DEFAULT NULL,
    p_run_after_failure BOOLEAN[] DEFAULT NULL
) RETURNS SETOF BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- the statement's own time, not the transaction's start: a group row is placed in the
    -- claim order by it, and a transaction may have begun long before
    v_now        TIMESTAMPTZ := clock_timestamp();
    -- each message's not_before, or now plus its delay (batches)
    v_ready_ats  TIMESTAMPTZ[];
    v_new_from   BIGINT;
    v_tags       BIGINT[];
    v_tag_keys   TEXT[];
    -- a tag's position in a NOTIFY (see harel_notify)
    c_hint_base  CONSTANT BIGINT := 4611686018427387904;
    v_count      INT := cardinality(p_groups);
    v_pending    TEXT[];
    v_firsts     BIGINT[];
    v_inlined    BIGINT[];
    v_inserted   BIGINT;
    v_due        BOOLEAN;
    v_invalid    TEXT;
    v_named_own  BOOLEAN;
    v_seq        BIGINT;
    v_seqs       BIGINT[];
    v_ready      TIMESTAMPTZ;
    v_results    BIGINT[];
    v_all_groups TEXT[];
    v_all_keys   TEXT[];
    v_holder     BIGINT;
    v_kept       BIGINT[];
    v_queue      SMALLINT := 0::smallint;
    v_queues     SMALLINT[];
    v_group_q    SMALLINT;
    v_mismatched BIGINT;
    v_all_own    BOOLEAN;
    v_names      TEXT[] := ARRAY[]::text[];
    v_ids        SMALLINT[] := ARRAY[]::smallint[];
    -- a traceparent, then an optional line feed and tracestate (printable ASCII)
    c_trace_shape CONSTANT TEXT :=
        '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(\n[ -~]*)?$';
    -- the name of a group of its own (reserved: see the batch path's insert)
    c_own_group   CONSTANT TEXT := '^own:[0-9]{19}$';
    -- the pending time: a job waiting for parents is not due before it (harel_queued_state)
    c_pending     CONSTANT TIMESTAMPTZ := timestamptz '9999-12-31 00:00:00+00';
    -- per message, the not-before time and the delay a message waiting for parents asked
    -- for (the delay counts from its release)
    v_wait_starts TIMESTAMPTZ[];
    v_wait_delays BIGINT[];
    k            RECORD;
BEGIN
    -- The limits of transport/message.rs, checked again here for callers that bypass it.
    IF v_count IS NULL OR v_count = 0
       OR cardinality(p_kinds) IS DISTINCT FROM v_count
       OR cardinality(p_payloads) IS DISTINCT FROM v_count
       OR cardinality(p_priorities) IS DISTINCT FROM v_count
       OR cardinality(p_not_before) IS DISTINCT FROM v_count
       OR cardinality(p_delay_ms) IS DISTINCT FROM v_count
       OR (p_unique_keys IS NOT NULL AND cardinality(p_unique_keys) <> v_count)
       OR (p_unique_hold_ms IS NOT NULL AND cardinality(p_unique_hold_ms) <> v_count)
       OR (p_queues IS NOT NULL AND cardinality(p_queues) <> v_count)
       OR (p_trace_contexts IS NOT NULL AND cardinality(p_trace_contexts) <> v_count)
       OR (p_fair_keys IS NOT NULL AND cardinality(p_fair_keys) <> v_count) THEN
        RAISE EXCEPTION 'harel_publish: the arrays must have one element per message'
            USING ERRCODE = '22023';
    END IF;
    -- (nested: a statement with a subquery costs an executor start even when it is not
    -- needed, and most publishes have no unique key)
    IF p_unique_keys IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM unnest(p_unique_keys) AS u(key)
                    WHERE octet_length(u.key) NOT BETWEEN 1 AND 1024) THEN
            RAISE EXCEPTION 'harel_publish: unique keys must be 1 to 1024 bytes'
                USING ERRCODE = '22023';
        END IF;
        IF p_unique_hold_ms IS NULL THEN
            p_unique_hold_ms := array_fill(NULL::bigint, ARRAY[v_count]);
        ELSIF EXISTS (SELECT 1 FROM unnest(p_unique_hold_ms) AS u(hold_ms)
                       WHERE u.hold_ms NOT BETWEEN 0 AND 3155760000000) THEN
            RAISE EXCEPTION 'harel_publish: unique hold periods are 0 to 100 years'
                USING ERRCODE = '22023';
        END IF;
    END IF;
    -- (nested, as the unique keys: most publishes name no fairness key)
    IF p_fair_keys IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM unnest(p_fair_keys) AS u(key) WHERE octet_length(u.key) > 255) THEN
            RAISE EXCEPTION 'harel_publish: fairness keys must be at most 255 bytes'
                USING ERRCODE = '22023';
        END IF;
    ELSE
        p_fair_keys := array_fill(''::text, ARRAY[v_count]);
    END IF;
    SELECT CASE
             WHEN bool_or(octet_length(x.group_id) NOT BETWEEN 1 AND 1024)
               THEN 'group ids must be 1 to 1024 bytes (or NULL: a group of its own)'
             WHEN bool_or(x.kind IS NULL OR octet_length(x.kind) NOT BETWEEN 1 AND 255)
               THEN 'job kinds must be 1 to 255 bytes'
             WHEN bool_or(x.payload IS NULL OR octet_length(x.payload) > 4194304)
               THEN 'payloads must be at most 4194304 bytes of JSON'
             WHEN bool_or(x.priority IS NULL OR x.priority NOT BETWEEN 0 AND 4)
               THEN 'priorities are 0 to 4'
             WHEN bool_or(x.delay_ms NOT BETWEEN 0 AND 3155760000000)
               THEN 'delays are 0 to 100 years'
             WHEN bool_or(NOT isfinite(x.not_before) OR x.not_before >= c_pending)
               THEN 'not-before times must be finite and before 9999-12-31'
           END,
           bool_or(x.group_id LIKE 'own:%')
      INTO v_invalid, v_named_own
      FROM unnest(p_groups, p_kinds, p_payloads, p_priorities, p_delay_ms, p_not_before)
           AS x(group_id, kind, payload, priority, delay_ms, not_before);
    IF v_invalid IS NOT NULL THEN
        RAISE EXCEPTION 'harel_publish: %', v_invalid USING ERRCODE = '22023';
    END IF;
    -- A caller's group named like a group of its own is a group of its own: a new one,
    -- named after the message's seq like a NULL's. Accepting such a name would let a
    -- producer take the name of a job another producer's open batch has drawn and not
    -- inserted yet (failing that batch on the duplicate), or join another's job.
    -- (Nested, as the unique keys above.)
    IF v_named_own THEN
        IF v_count = 1 THEN
            IF p_groups[1] ~ c_own_group THEN
                p_groups[1] := NULL;
            END IF;
        ELSE
            SELECT array_agg(CASE WHEN x.group_id ~ c_own_group THEN NULL ELSE x.group_id END
                             ORDER BY x.ord)
              INTO p_groups
              FROM unnest(p_groups) WITH ORDINALITY AS x(group_id, ord);
        END IF;
    END IF;

    -- (nested, as the unique keys above: most publishes carry no trace context)
    IF p_trace_contexts IS NOT NULL THEN
        IF v_count = 1 THEN
            IF octet_length(p_trace_contexts[1]) > 1024
               OR p_trace_contexts[1] !~ c_trace_shape THEN
                p_trace_contexts[1] := NULL;
            END IF;
        ELSE
            SELECT array_agg(CASE WHEN octet_length(t.context) <= 1024
                                       AND t.context ~ c_trace_shape
                                  THEN t.context END
                             ORDER BY t.ord)
              INTO p_trace_contexts
              FROM unnest(p_trace_contexts) WITH ORDINALITY AS t(context, ord);
        END IF;
    END IF;

    -- Dependencies (nested, as the unique keys above: most publishes have none). A message
    -- that waits keeps its start time aside and is not due before the pending time.
    IF p_after IS NOT NULL OR p_after_of IS NOT NULL THEN
        IF cardinality(p_after) IS DISTINCT FROM cardinality(p_after_of)
           OR cardinality(p_after) > 100000
           OR (p_run_after_failure IS NOT NULL AND cardinality(p_run_after_failure) <> v_count)
           OR EXISTS (SELECT 1 FROM unnest(p_after_of, p_after) AS d(waiter, parent)
                       WHERE d.waiter IS NULL OR d.waiter NOT BETWEEN 1 AND v_count
                          OR d.parent IS NULL OR d.parent = 0
                          OR (d.parent < 0 AND -d.parent >= d.waiter)) THEN
            RAISE EXCEPTION 'harel_publish: at most 100000 dependencies, each naming a message of the call and a job id, or an earlier message of the call as minus its position'
                USING ERRCODE = '22023';
        END IF;
        SELECT array_agg(CASE WHEN w.waiter IS NOT NULL THEN x.not_before END ORDER BY x.ord),
               array_agg(CASE WHEN w.waiter IS NOT NULL THEN x.delay_ms END ORDER BY x.ord),
               array_agg(CASE WHEN w.waiter IS NOT NULL THEN c_pending ELSE x.not_before END
                         ORDER BY x.ord),
               array_agg(CASE WHEN w.waiter IS NOT NULL THEN NULL ELSE x.delay_ms END
                         ORDER BY x.ord)
          INTO v_wait_starts, v_wait_delays, p_not_before, p_delay_ms
          FROM unnest(p_not_before, p_delay_ms) WITH ORDINALITY AS x(not_before, delay_ms, ord)
          LEFT JOIN (SELECT DISTINCT a.waiter FROM unnest(p_after_of) AS a(waiter)) AS w
            ON w.waiter = x.ord;
    END IF;

    -- One message (the common enqueue): the same steps with scalar statements, cheaper to
    -- run than the set-based batch path below.
    IF v_count = 1 THEN
        v_ready := COALESCE(p_not_before[1], v_now + p_delay_ms[1] * interval '1 millisecond');
        IF p_queues[1] IS NOT NULL AND p_queues[1] <> 'default' THEN
            v_queue := @schema@.harel_ensure_queue(p_queues[1]);
        END IF;
        v_seq := nextval('@schema@.transport_messages_seq_seq');
        p_groups[1] := COALESCE(p_groups[1], 'own:' || lpad(v_seq::text, 19, '0'));
        IF p_unique_keys[1] IS NOT NULL THEN
            v_holder := @schema@.harel_take_key(p_unique_keys[1], v_seq, p_unique_hold_ms[1]);
            IF v_holder <> v_seq THEN
                RETURN NEXT -v_holder;
                RETURN;
            END IF;
        END IF;
        RETURN NEXT v_seq;
        p_fair_keys[1] := COALESCE(p_fair_keys[1], '');
        -- due now: the group goes into the ready domain with its start tag (if it is created)
        IF v_ready IS NULL OR v_ready <= v_now THEN
            v_tags := @schema@.harel_fair_tags(ARRAY[v_queue], ARRAY[p_priorities[1]],
                                               ARRAY[p_fair_keys[1]]);
        END IF;
        LOOP
            INSERT INTO @schema@.transport_groups
                   (group_id, priority, available_at, inline_seq, inline_kind, inline_payload,
                    inline_enqueued_at, inline_not_before, inline_unique_key, queue_id,
                    inline_trace_context, fair_key, fair_tag)
            VALUES (p_groups[1], p_priorities[1], GREATEST(v_now, v_ready), v_seq, p_kinds[1],
                    p_payloads[1]::json, v_now, v_ready, p_unique_keys[1], v_queue,
                    p_trace_contexts[1], p_fair_keys[1], v_tags[1])
            ON CONFLICT (group_id) DO NOTHING;
            IF FOUND THEN
                v_new_from := v_tags[1] - c_hint_base;
                EXIT;
            END IF;
            SELECT g.queue_id INTO v_group_q FROM @schema@.transport_groups g
             WHERE g.group_id = p_groups[1] FOR KEY SHARE;
            IF FOUND THEN
                IF v_group_q <> v_queue THEN
                    RAISE EXCEPTION 'harel_publish: a group belongs to one queue, and this group is in another'
                        USING ERRCODE = 'HJ001';
                END IF;
                INSERT INTO @schema@.transport_messages
                       (seq, group_id, kind, payload, priority, not_before, enqueued_at,
                        unique_key, trace_context)
                OVERRIDING SYSTEM VALUE
                VALUES (v_seq, p_groups[1], p_kinds[1], p_payloads[1]::json, p_priorities[1],
                        v_ready, v_now, p_unique_keys[1], p_trace_contexts[1]);
                EXIT;
            END IF;
            -- deleted by a draining settle between the two statements: insert again
        END LOOP;
        IF p_after IS NOT NULL THEN
            PERFORM @schema@.harel_hold(ARRAY[v_seq], p_groups, p_unique_keys, p_after_of,
                                        p_after, COALESCE(p_run_after_failure, ARRAY[false]),
                                        v_wait_starts, v_wait_delays);
        END IF;
        IF v_ready IS NULL OR v_ready <= v_now THEN
            PERFORM @schema@.harel_notify(v_new_from);
        END IF;
        RETURN;
    END IF;

    -- Every message's seq, drawn in array order, and a group of its own for each message
    -- without one (named after its seq). A batch of such messages only (the common bulk
    -- load) gets both from one statement.
    v_all_own := cardinality(array_positions(p_groups, NULL)) = v_count;
    IF v_all_own THEN
        SELECT array_agg(s.seq ORDER BY s.ord),
               array_agg('own:' || lpad(s.seq::text, 19, '0') ORDER BY s.ord)
          INTO v_seqs, p_groups
          FROM (SELECT x.ord, nextval('@schema@.transport_messages_seq_seq') AS seq
                  FROM generate_series(1, v_count) AS x(ord)) AS s;
    ELSE
        SELECT array_agg(nextval('@schema@.transport_messages_seq_seq') ORDER BY x.ord)
          INTO v_seqs
          FROM generate_series(1, v_count) AS x(ord);
        IF array_position(p_groups, NULL) IS NOT NULL THEN
            SELECT array_agg(COALESCE(x.group_id, 'own:' || lpad(v_seqs[x.ord]::text, 19, '0'))
                             ORDER BY x.ord)
              INTO p_groups
              FROM unnest(p_groups) WITH ORDINALITY AS x(group_id, ord);
        END IF;
    END IF;
    v_results := v_seqs;
    -- (each message's group by its position, for harel_hold: the arrays below drop
    -- duplicates)
    v_all_groups := p_groups;
    v_all_keys := p_unique_keys;

    -- Each message's queue id (all 0 unless a queue is named), each named queue looked up
    -- (or created) once, in name order (two batches creating the same new queues wait for
    -- each other in one order, never in a cycle); one new group in two queues is refused.
    IF p_queues IS NOT NULL THEN
        FOR k IN SELECT DISTINCT u.name FROM unnest(p_queues) AS u(name)
                  WHERE u.name IS NOT NULL AND u.name <> 'default'
                  ORDER BY u.name LOOP
            v_names := v_names || k.name;
            v_ids := v_ids || @schema@.harel_ensure_queue(k.name);
        END LOOP;
        SELECT array_agg(COALESCE(n.id, 0::smallint) ORDER BY x.ord)
          INTO v_queues
          FROM unnest(p_queues) WITH ORDINALITY AS x(name, ord)
          LEFT JOIN unnest(v_names, v_ids) AS n(name, id) ON n.name = x.name;
        IF EXISTS (SELECT 1 FROM unnest(p_groups, v_queues) AS x(group_id, queue_id)
                    GROUP BY x.group_id HAVING min(x.queue_id) <> max(x.queue_id)) THEN
            RAISE EXCEPTION 'harel_publish: a group belongs to one queue, and this batch puts one in two'
                USING ERRCODE = 'HJ001';
        END IF;
    ELSE
        v_queues := array_fill(0::smallint, ARRAY[v_count]);
    END IF;

    -- Unique keys, in key order; a duplicate is dropped from every array below.
    IF p_unique_keys IS NOT NULL THEN
        FOR k IN SELECT u.key, min(u.ord) AS ord, array_agg(u.ord) AS ords
                   FROM unnest(p_unique_keys) WITH ORDINALITY AS u(key, ord)
                  WHERE u.key IS NOT NULL
                  GROUP BY u.key
                  ORDER BY u.key LOOP
            v_holder := @schema@.harel_take_key(k.key, v_seqs[k.ord], p_unique_hold_ms[k.ord]);
            FOR i IN 1..cardinality(k.ords) LOOP
                IF k.ords[i] <> k.ord OR v_holder <> v_seqs[k.ord] THEN
                    v_results[k.ords[i]] := -v_holder;
                END IF;
            END LOOP;
        END LOOP;
        SELECT array_agg(x.ord ORDER BY x.ord) INTO v_kept
          FROM unnest(v_results) WITH ORDINALITY AS x(result, ord)
         WHERE x.result > 0;
        IF v_kept IS NULL THEN
            RETURN QUERY SELECT unnest(v_results);
            RETURN;
        END IF;
        IF cardinality(v_kept) < v_count THEN
            SELECT array_agg(p_groups[o] ORDER BY o), array_agg(p_kinds[o] ORDER BY o),
                   array_agg(p_payloads[o] ORDER BY o), array_agg(p_priorities[o] ORDER BY o),
                   array_agg(p_not_before[o] ORDER BY o), array_agg(p_delay_ms[o] ORDER BY o),
                   array_agg(p_unique_keys[o] ORDER BY o), array_agg(v_seqs[o] ORDER BY o),
                   array_agg(v_queues[o] ORDER BY o), array_agg(p_trace_contexts[o] ORDER BY o),
                   array_agg(p_fair_keys[o] ORDER BY o)
              INTO p_groups, p_kinds, p_payloads, p_priorities, p_not_before, p_delay_ms,
                   p_unique_keys, v_seqs, v_queues, p_trace_contexts, p_fair_keys
              FROM unnest(v_kept) AS o;
            v_count := cardinality(v_kept);
        END IF;
    END IF;

    -- A batch of messages without a group (the bulk load): one row each, by a plain
    -- INSERT. No other row can hold these names: they are made of seqs drawn just now, and
    -- only this function names groups so (see above). So no ON CONFLICT, whose speculative
    -- insertion (a probe of the key and a second write per row) makes a 20,000-job insert
    -- 1.5 times as costly, and no sort: the names are in seq order.
    -- Each group's first message of the batch, sorted by group so that concurrent
    -- publishers take row locks in one order: it creates the group row if there is none
    -- (every message, in a batch of messages without a group).
    IF NOT v_all_own THEN
        SELECT array_agg(f.group_id ORDER BY f.group_id), array_agg(f.ord ORDER BY f.group_id)
          INTO v_pending, v_firsts
          FROM (SELECT DISTINCT ON (x.group_id) x.group_id, x.ord
                  FROM unnest(p_groups) WITH ORDINALITY AS x(group_id, ord)
                 ORDER BY x.group_id, x.ord) AS f;
    END IF;
    -- The start tags of the groups the batch creates due now; NULL for the others (a NULL
    -- key: harel_fair_tags gives it a partition of its own, unused), which stay timed. And
    -- each message's ready time, for the inserts below (here, in a statement that writes no
    -- table: Citus takes no non-immutable function, timestamptz + interval, in a COALESCE
    -- of a modification).
    SELECT array_agg(CASE WHEN (v_all_own OR f.ord IS NOT NULL)
                               AND COALESCE(COALESCE(x.not_before, v_now + x.delay_ms
                                                     * interval '1 millisecond') <= v_now,
                                            true)
                          THEN COALESCE(x.fair_key, '') END ORDER BY x.ord),
           array_agg(COALESCE(x.not_before, v_now + x.delay_ms * interval '1 millisecond')
                     ORDER BY x.ord)
      INTO v_tag_keys, v_ready_ats
      FROM unnest(p_fair_keys, p_not_before, p_delay_ms) WITH ORDINALITY
           AS x(fair_key, not_before, delay_ms, ord)
      -- (a hash join: a batch costs linear time in its size)
      LEFT JOIN unnest(v_firsts) AS f(ord) ON f.ord = x.ord;
    v_tags := @schema@.harel_fair_tags(v_queues, p_priorities, v_tag_keys);
    SELECT array_agg(CASE WHEN k.key IS NOT NULL THEN v_tags[k.ord] END ORDER BY k.ord),
           min(v_tags[k.ord]) FILTER (WHERE k.key IS NOT NULL) - c_hint_base
      INTO v_tags, v_new_from
      FROM unnest(v_tag_keys) WITH ORDINALITY AS k(key, ord);

    IF v_all_own THEN
        INSERT INTO @schema@.transport_groups
               (group_id, priority, available_at, inline_seq, inline_kind, inline_payload,
                inline_enqueued_at, inline_not_before, inline_unique_key, queue_id,
                inline_trace_context, fair_key, fair_tag)
        SELECT x.group_id, x.priority,
               GREATEST(v_now, x.ready_at),
               x.seq, x.kind, x.payload::json, v_now,
               x.ready_at,
               x.unique_key, x.queue_id, x.trace_context, COALESCE(x.fair_key, ''), x.fair_tag
          FROM unnest(p_groups, v_seqs, p_kinds, p_payloads, p_priorities, v_ready_ats,
                      p_unique_keys, v_queues, p_trace_contexts, p_fair_keys, v_tags)
               AS x(group_id, seq, kind, payload, priority, ready_at, unique_key,
                    queue_id, trace_context, fair_key, fair_tag);
    ELSE
        -- Every group needs a row that stays until we commit: insert the missing ones, their
        -- first message inline (existing groups keep their lease and priority), and KEY
        -- SHARE-lock the rest (the ones we just inserted too, harmlessly) so a draining settle
        -- cannot delete them. A row deleted between the two statements is inserted again in
        -- the next round. Set operations only (hash joins), so a batch costs linear time in
        -- its size.
        LOOP
            WITH inserted AS (
                INSERT INTO @schema@.transport_groups AS g
                       (group_id, priority, available_at, inline_seq, inline_kind, inline_payload,
                        inline_enqueued_at, inline_not_before, inline_unique_key, queue_id,
                        inline_trace_context, fair_key, fair_tag)
                SELECT u.group_id, p_priorities[u.ord],
                       GREATEST(v_now, v_ready_ats[u.ord]),
                       v_seqs[u.ord], p_kinds[u.ord], p_payloads[u.ord]::json, v_now,
                       v_ready_ats[u.ord],
                       p_unique_keys[u.ord], v_queues[u.ord], p_trace_contexts[u.ord],
                       COALESCE(p_fair_keys[u.ord], ''), v_tags[u.ord]
                  FROM unnest(v_pending, v_firsts) AS u(group_id, ord)
                 ORDER BY u.group_id
                ON CONFLICT (group_id) DO NOTHING
                RETURNING g.inline_seq
            )
            SELECT count(*), v_inlined || array_agg(i.inline_seq)
              INTO v_inserted, v_inlined
              FROM inserted i;
            EXIT WHEN v_inserted = cardinality(v_pending);

            -- (a locked group in another queue than its messages: one that existed before,
            -- as the groups just inserted carry the queue we gave them)
            WITH locked AS MATERIALIZED (
                SELECT g.group_id, g.queue_id FROM @schema@.transport_groups g
                 WHERE g.group_id = ANY (v_pending)
                 ORDER BY g.group_id
                   FOR KEY SHARE
            )
            SELECT array_agg(u.group_id ORDER BY u.group_id) FILTER (WHERE l.group_id IS NULL),
                   array_agg(u.ord ORDER BY u.group_id) FILTER (WHERE l.group_id IS NULL),
                   count(*) FILTER (WHERE l.queue_id <> v_queues[u.ord])
              INTO v_pending, v_firsts, v_mismatched
              FROM unnest(v_pending, v_firsts) AS u(group_id, ord)
              LEFT JOIN locked l ON l.group_id = u.group_id;
            IF v_mismatched > 0 THEN
                RAISE EXCEPTION 'harel_publish: a group belongs to one queue, and this batch adds to one in another'
                    USING ERRCODE = 'HJ001';
            END IF;
            EXIT WHEN v_pending IS NULL;
        END LOOP;

        -- The others into transport_messages (none when every message created its group).
        IF COALESCE(cardinality(v_inlined), 0) < v_count THEN
            INSERT INTO @schema@.transport_messages
                   (seq, group_id, kind, payload, priority, not_before, enqueued_at, unique_key,
                    trace_context)
            OVERRIDING SYSTEM VALUE
            SELECT x.seq, x.group_id, x.kind, x.payload::json, x.priority,
                   v_ready_ats[x.ord], v_now,
                   p_unique_keys[x.ord], p_trace_contexts[x.ord]
              FROM unnest(v_seqs, p_groups, p_kinds, p_payloads, p_priorities) WITH ORDINALITY
                   AS x(seq, group_id, kind, payload, priority, ord)
             WHERE NOT EXISTS (SELECT 1 FROM unnest(v_inlined) AS i(seq) WHERE i.seq = x.seq)
             ORDER BY x.seq;
        END IF;
    END IF;

    IF p_after IS NOT NULL THEN
        PERFORM @schema@.harel_hold(v_results, v_all_groups, v_all_keys, p_after_of, p_after,
                                    COALESCE(p_run_after_failure,
                                             array_fill(false, ARRAY[cardinality(v_results)])),
                                    v_wait_starts, v_wait_delays);
    END IF;

    RETURN QUERY SELECT unnest(v_results);

    -- wake idle workers when the transaction commits (see harel_notify)
    SELECT bool_or(x.not_before IS NULL AND COALESCE(x.delay_ms, 0) <= 0) INTO v_due
      FROM unnest(p_not_before, p_delay_ms) AS x(not_before, delay_ms);
    IF v_due THEN
        PERFORM @schema@.harel_notify(v_new_from);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_publish(
    TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[], TEXT[], BIGINT[], TEXT[],
    TEXT[], TEXT[], INT[], BIGINT[], BOOLEAN[])
    FROM PUBLIC;
