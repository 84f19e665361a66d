-- harel-jobs 0001: the per-group transport.
--
-- `@schema@` is replaced by the configured schema (a validated, quoted identifier) and
-- `@channel@` by the NOTIFY channel (a string literal) before this file runs. Everything
-- runs in one transaction under an advisory lock (see migrate.rs).
--
-- The queue is two tables. `transport_messages` holds the jobs, FIFO per group by `seq`.
-- `transport_groups` holds one row per group that has messages, carrying the group's lease.
-- A claim leases a group row (FOR NO KEY UPDATE SKIP LOCKED), so concurrent claimers lease
-- different groups without waiting on each other, and one group has one consumer at a time.

CREATE TABLE @schema@.transport_messages (
    group_id    TEXT        NOT NULL,
    seq         BIGINT      GENERATED ALWAYS AS IDENTITY,
    kind        TEXT        NOT NULL,
    payload     JSON        NOT NULL,
    -- the priority asked for at publish; the group's priority is the one of its first message
    priority    SMALLINT    NOT NULL CHECK (priority BETWEEN 0 AND 4),
    enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- NULL: due at once; otherwise the message may not start before this time
    not_before  TIMESTAMPTZ,
    -- attempts made while the message was not its group's current head (see head_attempts)
    attempts    INT         NOT NULL DEFAULT 0,
    last_error  TEXT,
    -- (group_id, seq) is both the key and the head-of-group lookup: one index per message
    PRIMARY KEY (group_id, seq)
) WITH (fillfactor = 90);

CREATE TABLE @schema@.transport_groups (
    group_id      TEXT        PRIMARY KEY,
    priority      SMALLINT    NOT NULL CHECK (priority BETWEEN 0 AND 4),
    -- When the group may next be claimed. While free it is the time the group became free
    -- (first publish, last ack), so ordering by it is round-robin: a group that was just
    -- served goes behind every group that has been waiting. While leased it is the lease
    -- expiry, while parked (retry backoff) the end of the park. Never NULL, so a claim is one
    -- index range scan on (priority, available_at <= now()) in index order: no sort, no
    -- COALESCE, and its cost does not grow with the number of waiting groups.
    available_at  TIMESTAMPTZ NOT NULL,
    -- the lease token while leased or parked, NULL while free
    locked_by     UUID,
    -- the message the current attempt count belongs to, and that count (counted at claim,
    -- so a worker that dies mid-job still used up an attempt)
    head_seq      BIGINT,
    head_attempts INT         NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

CREATE INDEX transport_groups_claimable
    ON @schema@.transport_groups (priority, available_at);

CREATE TABLE @schema@.dead_letters (
    id          BIGINT      PRIMARY KEY,  -- the message's seq
    group_id    TEXT        NOT NULL,
    kind        TEXT        NOT NULL,
    payload     JSON        NOT NULL,
    priority    SMALLINT    NOT NULL,
    attempts    INT         NOT NULL,
    last_error  TEXT        NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL,
    failed_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX dead_letters_failed_at ON @schema@.dead_letters (failed_at, id);

-- The queue tables churn (every job is inserted, updated and deleted): vacuum them early
-- and often, so dead row versions never pile up in front of the claim's index scan.
ALTER TABLE @schema@.transport_groups SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE @schema@.transport_messages SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);

-- harel_publish: append messages and make sure each of their groups has a row.
--
-- Arrays, one element per message, so a batch is one round trip; the messages get their
-- `seq` in array order. A message's not-before time is `p_not_before`, or now() plus
-- `p_delay_ms`, or NULL (due at once).
--
-- Why the group row is locked FOR KEY SHARE when it already exists: an ack that drains a
-- group deletes its row, and cannot see a message this (maybe long) transaction has not
-- committed. Holding KEY SHARE blocks that delete (the ack then frees the row instead, see
-- harel_drop_empty_groups) without blocking claims, acks or extensions, which are non-key
-- updates. If the row was deleted between our INSERT … ON CONFLICT and the lock, we loop and
-- insert it again.
CREATE OR REPLACE FUNCTION @schema@.harel_publish(
    p_groups      TEXT[],
    p_kinds       TEXT[],
    p_payloads    TEXT[],
    p_priorities  SMALLINT[],
    p_not_before  TIMESTAMPTZ[],
    p_delay_ms    BIGINT[]
) RETURNS SETOF BIGINT
LANGUAGE plpgsql
-- Plan the statements once per session. With the default plan cache mode, PL/pgSQL keeps
-- re-planning statements whose generic plan it estimates as costlier (array and LIMIT
-- parameters), and planning these statements costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now     TIMESTAMPTZ := now();
    v_pending    TEXT[];
    v_priorities SMALLINT[];
    v_ready_at   TIMESTAMPTZ[];
    v_count      BIGINT;
    v_due     BOOLEAN;
    v_seq     BIGINT;
    v_ready   TIMESTAMPTZ;
BEGIN
    -- One message (the common enqueue): the same steps with scalar statements, cheaper to
    -- run than the set-based batch path below.
    IF cardinality(p_groups) = 1 THEN
        v_ready := COALESCE(p_not_before[1], v_now + p_delay_ms[1] * interval '1 millisecond');
        INSERT INTO @schema@.transport_messages (group_id, kind, payload, priority, not_before)
        VALUES (p_groups[1], p_kinds[1], p_payloads[1]::json, p_priorities[1], v_ready)
        RETURNING seq INTO v_seq;
        RETURN NEXT v_seq;
        LOOP
            INSERT INTO @schema@.transport_groups (group_id, priority, available_at)
            VALUES (p_groups[1], p_priorities[1], GREATEST(v_now, v_ready))
            ON CONFLICT (group_id) DO NOTHING;
            EXIT WHEN FOUND;
            PERFORM 1 FROM @schema@.transport_groups g
              WHERE g.group_id = p_groups[1] FOR KEY SHARE;
            EXIT WHEN FOUND;
            -- deleted by a draining ack between the two statements: insert again
        END LOOP;
        IF v_ready IS NULL OR v_ready <= v_now THEN
            PERFORM pg_notify(@channel@, '');
        END IF;
        RETURN;
    END IF;

    RETURN QUERY
    INSERT INTO @schema@.transport_messages (group_id, kind, payload, priority, not_before)
    SELECT x.group_id, x.kind, x.payload::json, x.priority,
           COALESCE(x.not_before, v_now + x.delay_ms * interval '1 millisecond')
      FROM unnest(p_groups, p_kinds, p_payloads, p_priorities, p_not_before, p_delay_ms)
           WITH ORDINALITY AS x(group_id, kind, payload, priority, not_before, delay_ms, ord)
     ORDER BY x.ord
    RETURNING seq;

    -- Each group's first message of the batch, sorted by group so that concurrent
    -- publishers take row locks in one order: the values a new group row starts with.
    SELECT array_agg(f.group_id ORDER BY f.group_id),
           array_agg(f.priority ORDER BY f.group_id),
           array_agg(f.ready_at ORDER BY f.group_id)
      INTO v_pending, v_priorities, v_ready_at
      FROM (SELECT DISTINCT ON (x.group_id) x.group_id, x.priority,
                   GREATEST(v_now, COALESCE(x.not_before,
                                            v_now + x.delay_ms * interval '1 millisecond')) AS ready_at
              FROM unnest(p_groups, p_priorities, p_not_before, p_delay_ms)
                   WITH ORDINALITY AS x(group_id, priority, not_before, delay_ms, ord)
             ORDER BY x.group_id, x.ord) AS f;

    -- Every group needs a row that stays until we commit: insert the missing ones (with
    -- their first message's priority; existing groups keep their lease and priority), and
    -- KEY SHARE-lock the existing ones so a draining ack cannot delete them. A row deleted
    -- between the two statements is inserted again in the next round. Set operations only
    -- (hash joins), so a batch costs linear time in its size.
    LOOP
        WITH inserted AS (
            INSERT INTO @schema@.transport_groups AS g (group_id, priority, available_at)
            SELECT u.group_id, u.priority, u.ready_at
              FROM unnest(v_pending, v_priorities, v_ready_at) AS u(group_id, priority, ready_at)
             ORDER BY u.group_id
            ON CONFLICT (group_id) DO NOTHING
            RETURNING g.group_id
        )
        SELECT count(*) INTO v_count FROM inserted;
        EXIT WHEN v_count = cardinality(v_pending);

        WITH locked AS MATERIALIZED (
            SELECT g.group_id FROM @schema@.transport_groups g
             WHERE g.group_id IN (SELECT unnest(v_pending))
             ORDER BY g.group_id
               FOR KEY SHARE
        )
        SELECT array_agg(u.group_id ORDER BY u.group_id),
               array_agg(u.priority ORDER BY u.group_id),
               array_agg(u.ready_at ORDER BY u.group_id)
          INTO v_pending, v_priorities, v_ready_at
          FROM unnest(v_pending, v_priorities, v_ready_at) AS u(group_id, priority, ready_at)
         WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.group_id = u.group_id);
        EXIT WHEN v_pending IS NULL;
    END LOOP;

    -- wake idle workers when the transaction commits (never before; duplicates in one
    -- transaction are folded into one notification by PostgreSQL)
    SELECT bool_or(x.not_before IS NULL AND COALESCE(x.delay_ms, 0) <= 0) INTO v_due
      FROM unnest(p_not_before, p_delay_ms) AS x(not_before, delay_ms);
    IF v_due THEN
        PERFORM pg_notify(@channel@, '');
    END IF;
END
$$;

-- harel_drop_empty_groups: called by a lease holder (claim or ack) for groups it holds and
-- found without a visible message. Deletes the rows that really are empty, and frees the
-- others (a publisher's message committed meanwhile, or a publisher still holds KEY SHARE:
-- its message will become visible when it commits). Returns the groups it freed.
--
-- The delete needs FOR UPDATE, which conflicts with a publisher's KEY SHARE; SKIP LOCKED
-- so we never wait on an application transaction. After taking the lock, the emptiness is
-- checked again in a new statement, whose fresh snapshot sees every message committed before
-- the lock was granted; later publishers block on our lock and then insert a new row.
CREATE OR REPLACE FUNCTION @schema@.harel_drop_empty_groups(
    p_groups  TEXT[],
    p_retry_at TIMESTAMPTZ
) RETURNS VOID
LANGUAGE plpgsql
-- Plan the statements once per session. With the default plan cache mode, PL/pgSQL keeps
-- re-planning statements whose generic plan it estimates as costlier (array and LIMIT
-- parameters), and planning these statements costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_lockable TEXT[];
    v_deleted  TEXT[];
BEGIN
    SELECT array_agg(k.group_id) INTO v_lockable
      FROM (SELECT g.group_id FROM @schema@.transport_groups g
             WHERE g.group_id = ANY (p_groups)
             ORDER BY g.group_id
               FOR UPDATE SKIP LOCKED) AS k;

    WITH deleted AS (
        DELETE FROM @schema@.transport_groups g
         WHERE g.group_id = ANY (v_lockable)
           AND NOT EXISTS (SELECT 1 FROM @schema@.transport_messages m
                            WHERE m.group_id = g.group_id)
        RETURNING g.group_id
    )
    SELECT array_agg(d.group_id) INTO v_deleted FROM deleted d;

    -- Not deleted: free it. If we got the lock, the group has a committed message now and is
    -- claimable at once; if a publisher holds KEY SHARE, its message is not visible yet, so
    -- look again at p_retry_at rather than spin on an empty group.
    UPDATE @schema@.transport_groups g
       SET locked_by = NULL, head_seq = NULL, head_attempts = 0,
           available_at = CASE WHEN g.group_id = ANY (v_lockable) THEN statement_timestamp()
                               ELSE p_retry_at END
     WHERE g.group_id = ANY (p_groups)
       AND g.group_id <> ALL (COALESCE(v_deleted, '{}'));
END
$$;

-- harel_claim: lease up to p_limit different groups and return the head message of each.
--
-- One round trip. Highest priority first (4 down to p_min_priority); within a priority, the
-- group that has been claimable the longest first (round-robin). Each priority level is one
-- index range scan of transport_groups_claimable in index order that stops after p_limit
-- rows: no sort, and the cost does not grow with the number of waiting groups.
-- FOR NO KEY UPDATE SKIP LOCKED: concurrent claimers skip each other's rows and so lease
-- different groups without waiting; the lock does not conflict with a publisher's KEY SHARE.
--
-- The lease ends at statement_timestamp() + p_lease_ms on the DATABASE clock: workers pass
-- durations, never times, so a worker whose clock is off cannot shorten or stretch anyone's
-- lease. Not now(): that is the start of the transaction, and a claim made late in a long
-- transaction would get a lease that is over before anyone can see it. (The same holds for
-- ack, nack and extend below.)
-- The attempt number is counted here, in the database, before the handler runs.
CREATE OR REPLACE FUNCTION @schema@.harel_claim(
    p_token        UUID,
    p_lease_ms     BIGINT,
    p_limit        INT,
    p_min_priority INT DEFAULT 0
) RETURNS TABLE (
    group_id    TEXT,
    seq         BIGINT,
    kind        TEXT,
    payload     TEXT,
    attempt     INT,
    priority    SMALLINT,
    enqueued_at TIMESTAMPTZ
)
LANGUAGE plpgsql
-- Plan the statements once per session. With the default plan cache mode, PL/pgSQL keeps
-- re-planning statements whose generic plan it estimates as costlier (array and LIMIT
-- parameters), and planning these statements costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now        TIMESTAMPTZ := statement_timestamp();
    v_expiry     TIMESTAMPTZ := statement_timestamp() + p_lease_ms * interval '1 millisecond';
    v_need       INT := p_limit;
    v_rounds     INT := 0;
    v_groups     TEXT[];
    v_seqs       BIGINT[];
    v_kinds      TEXT[];
    v_payloads   TEXT[];
    v_attempts   INT[];
    v_priority   SMALLINT[];
    v_enqueued   TIMESTAMPTZ[];
    v_candidates TEXT[];
    v_empty      TEXT[];
    v_not_due    INT;
BEGIN
    IF p_limit < 1 OR p_lease_ms < 1 OR p_min_priority NOT BETWEEN 0 AND 4 THEN
        RAISE EXCEPTION 'harel_claim: need p_limit >= 1, p_lease_ms >= 1, p_min_priority in 0..4'
            USING ERRCODE = '22023';
    END IF;

    LOOP
        v_rounds := v_rounds + 1;

        -- Lock candidates. This statement only locks: its snapshot may predate the commit
        -- of a transaction that completed a candidate's head (a late ack, or a claim and
        -- ack in one transaction), and the row lock then follows the row to its newest
        -- version, which can be claimable again. The heads must be read by a statement
        -- that starts after the locks are granted.
        SELECT array_agg(c.group_id ORDER BY c.level DESC, c.available_at)
          INTO v_candidates
          FROM (SELECT p.level, c.group_id, c.available_at
                  FROM generate_series(4, p_min_priority, -1) AS p(level)
                 CROSS JOIN LATERAL (
                        SELECT g.group_id, g.available_at
                          FROM @schema@.transport_groups g
                         WHERE g.priority = p.level AND g.available_at <= v_now
                         ORDER BY g.available_at
                         LIMIT v_need
                           FOR NO KEY UPDATE SKIP LOCKED) AS c
                 LIMIT v_need) AS c;
        EXIT WHEN v_candidates IS NULL;

        -- A new statement, whose snapshot sees every commit made before our locks were
        -- granted: read each candidate's head and settle every candidate. A due head is
        -- leased; an empty group is kept aside for the drop below; a group whose head is not
        -- due yet (a delayed message became head) sleeps until it is.
        WITH candidate AS (
            SELECT g.group_id, g.head_seq, g.head_attempts, k.ord
              FROM unnest(v_candidates) WITH ORDINALITY AS k(group_id, ord)
              JOIN @schema@.transport_groups g ON g.group_id = k.group_id
        ), head AS (
            SELECT c.group_id, c.ord, m.seq, m.kind, m.payload, m.priority, m.enqueued_at,
                   m.not_before,
                   m.seq IS NOT NULL AND (m.not_before IS NULL OR m.not_before <= v_now) AS due,
                   CASE WHEN m.seq = c.head_seq THEN c.head_attempts ELSE m.attempts END + 1
                       AS attempt
              FROM candidate c
              LEFT JOIN LATERAL (
                    SELECT m.seq, m.kind, m.payload, m.priority, m.enqueued_at, m.not_before,
                           m.attempts
                      FROM @schema@.transport_messages m
                     WHERE m.group_id = c.group_id
                     ORDER BY m.seq
                     LIMIT 1) AS m ON true
        ), settled AS (
            UPDATE @schema@.transport_groups g
               SET locked_by     = CASE WHEN h.due THEN p_token END,
                   available_at  = CASE WHEN h.due THEN v_expiry ELSE h.not_before END,
                   head_seq      = CASE WHEN h.due THEN h.seq ELSE g.head_seq END,
                   head_attempts = CASE WHEN h.due THEN h.attempt ELSE g.head_attempts END
              FROM head h
             WHERE g.group_id = h.group_id
               AND h.seq IS NOT NULL
        )
        SELECT array_agg(h.group_id      ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.seq           ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.kind          ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.payload::text ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.attempt       ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.priority      ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.enqueued_at   ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.group_id)                     FILTER (WHERE h.seq IS NULL),
               count(*) FILTER (WHERE h.seq IS NOT NULL AND NOT h.due)
          INTO v_groups, v_seqs, v_kinds, v_payloads, v_attempts, v_priority, v_enqueued,
               v_empty, v_not_due
          FROM head h;

        IF v_groups IS NOT NULL THEN
            RETURN QUERY
            SELECT * FROM unnest(v_groups, v_seqs, v_kinds, v_payloads, v_attempts, v_priority,
                                 v_enqueued);
            v_need := v_need - cardinality(v_groups);
        END IF;

        -- Done when full, or when nothing odd was met (the queue has no more due groups).
        EXIT WHEN v_need = 0 OR (v_empty IS NULL AND v_not_due = 0) OR v_rounds >= 8;

        -- Empty groups: a drain raced a publish, or a stale row. Drop or free them; one whose
        -- publisher is still open is looked at again shortly, never spun on.
        IF v_empty IS NOT NULL THEN
            PERFORM @schema@.harel_drop_empty_groups(
                v_empty, clock_timestamp() + interval '200 milliseconds');
        END IF;
    END LOOP;
END
$$;

-- harel_ack: complete leased messages, one round trip for a batch.
--
-- Fenced per message: a message is completed only if its group is still leased to the token
-- that claimed it, at that message. A message with a non-NULL entry in p_errors goes to the
-- dead-letter table with that error instead (a permanent failure, or out of attempts). Each
-- completed group moves on: freed with available_at = the ack's time (behind every waiting
-- group: round-robin) if it has more messages, its row deleted if it is drained.
-- Returns one row per input message, in input order: whether it was completed (false: the
-- lease was lost). The outcome is per lease (message AND token): a batch may hold a stale
-- lease and the current lease of one message.
CREATE OR REPLACE FUNCTION @schema@.harel_ack(
    p_groups   TEXT[],
    p_seqs     BIGINT[],
    p_tokens   UUID[],
    p_errors   TEXT[] DEFAULT NULL,
    -- attempts to record with a dead letter instead of the claim count: a worker that gives
    -- up on a job without running it (out of attempts) did not make the last claim's attempt
    p_attempts INT[] DEFAULT NULL
) RETURNS TABLE (seq BIGINT, acked BOOLEAN)
LANGUAGE plpgsql
-- Plan the statements once per session. With the default plan cache mode, PL/pgSQL keeps
-- re-planning statements whose generic plan it estimates as costlier (array and LIMIT
-- parameters), and planning these statements costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      TIMESTAMPTZ := statement_timestamp();
    v_groups   TEXT[];
    v_seqs     BIGINT[];
    v_tokens   UUID[];
    v_attempts INT[];
    v_errors   TEXT[];
    v_drained  TEXT[];
BEGIN
    -- the fence, and the row locks we need to move the groups on (sorted: no deadlocks)
    SELECT array_agg(f.group_id), array_agg(f.seq), array_agg(f.token),
           array_agg(f.head_attempts), array_agg(f.error)
      INTO v_groups, v_seqs, v_tokens, v_attempts, v_errors
      FROM (SELECT g.group_id, x.seq, x.token, COALESCE(x.attempts, g.head_attempts) AS head_attempts,
                   x.error
              FROM unnest(p_groups, p_seqs, p_tokens, p_errors, p_attempts)
                   AS x(group_id, seq, token, error, attempts)
              JOIN @schema@.transport_groups g
                ON g.group_id = x.group_id AND g.locked_by = x.token AND g.head_seq = x.seq
             ORDER BY g.group_id
               FOR NO KEY UPDATE OF g) AS f;

    IF v_groups IS NOT NULL THEN
        WITH gone AS (
            DELETE FROM @schema@.transport_messages m
             USING unnest(v_groups, v_seqs) AS f(group_id, seq)
             WHERE m.group_id = f.group_id AND m.seq = f.seq
            RETURNING m.seq, m.group_id, m.kind, m.payload, m.priority, m.enqueued_at
        )
        INSERT INTO @schema@.dead_letters
               (id, group_id, kind, payload, priority, attempts, last_error, enqueued_at)
        SELECT gone.seq, gone.group_id, gone.kind, gone.payload, gone.priority, e.attempts,
               e.error, gone.enqueued_at
          FROM gone
          JOIN unnest(v_seqs, v_attempts, v_errors) AS e(seq, attempts, error)
            ON e.seq = gone.seq
         WHERE e.error IS NOT NULL;

        -- a new statement: its snapshot sees messages committed since the fence
        WITH next_head AS (
            SELECT f.group_id, n.not_before, n.seq IS NOT NULL AS has_next
              FROM unnest(v_groups) AS f(group_id)
              LEFT JOIN LATERAL (
                    SELECT m.seq, m.not_before
                      FROM @schema@.transport_messages m
                     WHERE m.group_id = f.group_id
                     ORDER BY m.seq
                     LIMIT 1) AS n ON true
        ), freed AS (
            UPDATE @schema@.transport_groups g
               SET locked_by = NULL, head_seq = NULL, head_attempts = 0,
                   available_at = GREATEST(v_now, nh.not_before)
              FROM next_head nh
             WHERE g.group_id = nh.group_id AND nh.has_next
        )
        SELECT array_agg(nh.group_id) FILTER (WHERE NOT nh.has_next) INTO v_drained
          FROM next_head nh;

        IF v_drained IS NOT NULL THEN
            PERFORM @schema@.harel_drop_empty_groups(
                v_drained, clock_timestamp() + interval '200 milliseconds');
        END IF;
    END IF;

    RETURN QUERY
    SELECT x.seq, EXISTS (SELECT 1 FROM unnest(v_seqs, v_tokens) AS done(seq, token)
                           WHERE done.seq = x.seq AND done.token = x.token)
      FROM unnest(p_seqs, p_tokens) WITH ORDINALITY AS x(seq, token, ord)
     ORDER BY x.ord;
END
$$;

-- harel_nack: give leased messages back, fenced like harel_ack, one round trip for a batch.
--
-- p_delay_ms > 0 parks the group until the nack's time + delay, keeping the token (a retry
-- backoff: later messages of the group wait, so FIFO holds). p_delay_ms <= 0 frees it at once.
-- p_count_attempt = false gives the attempt back (a job released before it started).
-- p_errors records the failure on the message (and its attempt count, which survives the
-- message being displaced as head). Returns one row per input, in input order, per lease
-- like harel_ack.
CREATE OR REPLACE FUNCTION @schema@.harel_nack(
    p_groups        TEXT[],
    p_seqs          BIGINT[],
    p_tokens        UUID[],
    p_delay_ms      BIGINT[],
    p_errors        TEXT[],
    p_count_attempt BOOLEAN[]
) RETURNS TABLE (seq BIGINT, nacked BOOLEAN)
LANGUAGE plpgsql
-- Plan the statements once per session. With the default plan cache mode, PL/pgSQL keeps
-- re-planning statements whose generic plan it estimates as costlier (array and LIMIT
-- parameters), and planning these statements costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now    TIMESTAMPTZ := statement_timestamp();
    v_seqs   BIGINT[];
    v_tokens UUID[];
BEGIN
    -- lock the held rows in group order first, as harel_ack and harel_extend do: batches
    -- of one worker's heartbeat and completer touch the same rows and must not deadlock
    PERFORM 1
       FROM unnest(p_groups, p_seqs, p_tokens) AS x(group_id, seq, token)
       JOIN @schema@.transport_groups g
         ON g.group_id = x.group_id AND g.locked_by = x.token AND g.head_seq = x.seq
      ORDER BY g.group_id
        FOR NO KEY UPDATE OF g;

    WITH parked AS (
        UPDATE @schema@.transport_groups g
           SET locked_by     = CASE WHEN x.delay_ms > 0 THEN g.locked_by END,
               available_at  = v_now + GREATEST(x.delay_ms, 0) * interval '1 millisecond',
               head_attempts = g.head_attempts
                               - CASE WHEN COALESCE(x.count_attempt, true) THEN 0 ELSE 1 END
          FROM unnest(p_groups, p_seqs, p_tokens, p_delay_ms, p_count_attempt)
               AS x(group_id, seq, token, delay_ms, count_attempt)
         WHERE g.group_id = x.group_id AND g.locked_by = x.token AND g.head_seq = x.seq
        RETURNING g.group_id, g.head_seq, g.head_attempts, x.token
    ), recorded AS (
        UPDATE @schema@.transport_messages m
           SET attempts = p.head_attempts, last_error = e.error
          FROM parked p
          JOIN unnest(p_seqs, p_tokens, p_errors) AS e(seq, token, error)
            ON e.seq = p.head_seq AND e.token = p.token
         WHERE m.group_id = p.group_id AND m.seq = p.head_seq AND e.error IS NOT NULL
    )
    SELECT array_agg(p.head_seq), array_agg(p.token) INTO v_seqs, v_tokens FROM parked p;

    RETURN QUERY
    SELECT x.seq, EXISTS (SELECT 1 FROM unnest(v_seqs, v_tokens) AS done(seq, token)
                           WHERE done.seq = x.seq AND done.token = x.token)
      FROM unnest(p_seqs, p_tokens) WITH ORDINALITY AS x(seq, token, ord)
     ORDER BY x.ord;
END
$$;

-- harel_extend: the heartbeat. Pushes the lease of each (group, message, token) still held
-- to the extension's time + p_lease_ms, one round trip for a batch. Returns one row per
-- input, in input order, per lease like harel_ack: whether it was extended (false: the lease
-- was lost).
CREATE OR REPLACE FUNCTION @schema@.harel_extend(
    p_groups   TEXT[],
    p_seqs     BIGINT[],
    p_tokens   UUID[],
    p_lease_ms BIGINT
) RETURNS TABLE (seq BIGINT, extended BOOLEAN)
LANGUAGE plpgsql
-- Plan the statements once per session. With the default plan cache mode, PL/pgSQL keeps
-- re-planning statements whose generic plan it estimates as costlier (array and LIMIT
-- parameters), and planning these statements costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_expiry TIMESTAMPTZ := statement_timestamp() + p_lease_ms * interval '1 millisecond';
    v_seqs   BIGINT[];
    v_tokens UUID[];
BEGIN
    -- lock the held rows in group order first, as harel_ack and harel_nack do: this
    -- worker's completer may be acking some of these groups at the same moment
    PERFORM 1
       FROM unnest(p_groups, p_seqs, p_tokens) AS x(group_id, seq, token)
       JOIN @schema@.transport_groups g
         ON g.group_id = x.group_id AND g.locked_by = x.token AND g.head_seq = x.seq
      ORDER BY g.group_id
        FOR NO KEY UPDATE OF g;

    WITH extended AS (
        UPDATE @schema@.transport_groups g
           SET available_at = v_expiry
          FROM unnest(p_groups, p_seqs, p_tokens) AS x(group_id, seq, token)
         WHERE g.group_id = x.group_id AND g.locked_by = x.token AND g.head_seq = x.seq
        RETURNING g.head_seq, x.token
    )
    SELECT array_agg(e.head_seq), array_agg(e.token) INTO v_seqs, v_tokens FROM extended e;

    RETURN QUERY
    SELECT x.seq, EXISTS (SELECT 1 FROM unnest(v_seqs, v_tokens) AS done(seq, token)
                           WHERE done.seq = x.seq AND done.token = x.token)
      FROM unnest(p_seqs, p_tokens) WITH ORDINALITY AS x(seq, token, ord)
     ORDER BY x.ord;
END
$$;
