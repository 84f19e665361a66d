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
-- harel_settle and harel_extend.)
-- The attempt number is counted here, in the database, before the handler runs.
--
-- Each level's scan starts at its claim floor (migration 0003), not at the oldest entry of
-- the index: an old snapshot keeps every dead entry behind the floor, and the scan never
-- sees them. p_hint (a position in microseconds since the epoch, from a publisher's NOTIFY)
-- lowers the floors: a group its publisher committed after the floor passed it (only to
-- the position of a group that is there: see below). After its scan the claim raises each level's floor to FLOOR_MARGIN below the oldest
-- group it found there (or below now, if the level had none): everything under that is
-- dead, leased until later, or written by a transaction that commits more than
-- FLOOR_MARGIN after it wrote (a long application transaction around an enqueue: its
-- NOTIFY or harel_maintain's sweep brings it back).
--
-- Trace context (migration 0009): each row's `trace_context` is the head message's W3C
-- traceparent (and tracestate) as harel_publish stored it, NULL for most jobs.
--
-- Named queues (migration 0007): a claim takes groups of one queue (p_queue), through that
-- queue's part of the index and its own floors. A paused queue, or one nothing was ever
-- published into, gives nothing. A queue with a concurrency limit or a rate limit is
-- claimed under a lock of the queue's row in `queues` (migration 0011; claims of other
-- queues never wait for it): the claim takes at most the limit less the queue's live
-- leases (counted through transport_groups_limited, where this claim puts its leases), and
-- at most the starts the rate allows now (a generic cell rate algorithm: the sequence
-- queue_rate_q<N> holds the theoretical arrival time, advanced by what was claimed; a burst
-- of up to the limit is allowed after a quiet period).
--
-- The lock is a row lock, not an advisory lock: advisory locks are one namespace that every
-- login shares, and a login granted nothing could hold the key and stop the queue. Only
-- the queue's owner (so only these functions) can lock its rows. A claim waits for the
-- lock at most p_wait_ms (the worker passes half of its database timeout; 10 s when NULL)
-- and then returns nothing: the server gives up before the worker does, so a claim the
-- worker has abandoned never leases anything afterwards.
--
-- The rate's state is read against the limit as it is now: a theoretical arrival time
-- further ahead than one period of the current limit (under a constant limit it never is)
-- is brought back to one period ahead, as if the current limit had just used its last
-- start. So raising a limit, or removing it and setting it again, takes effect at the next
-- claim (the next start comes one interval of the new limit later) instead of waiting out
-- the old limit's period (a day, for a limit of 1 per day).
CREATE OR REPLACE FUNCTION @schema@.harel_claim(
    p_token        UUID,
    p_lease_ms     BIGINT,
    p_limit        INT,
    p_min_priority INT DEFAULT 0,
    p_hint         BIGINT DEFAULT NULL,
    p_queue        TEXT DEFAULT 'default',
    p_wait_ms      INT DEFAULT NULL
) RETURNS TABLE (
    group_id    TEXT,
    seq         BIGINT,
    kind        TEXT,
    payload     TEXT,
    attempt     INT,
    priority    SMALLINT,
    enqueued_at TIMESTAMPTZ,
    trace_context TEXT
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
-- the longest wait for a limited queue's row lock when p_wait_ms is NULL (the worker's
-- default database timeout); p_wait_ms sets it for the call, restored at the function's end
SET lock_timeout = '10s'
-- every table is reached by key or by the claimable index: never a walk of a small table
-- comparing each row with a whole array (3 ms of a 7.7 ms claim of 256 among 1,000 groups)
SET enable_seqscan = off
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
    v_traces     TEXT[];
    v_candidates TEXT[];
    v_empty      TEXT[];
    v_cancelled  TEXT[];
    v_not_due    BIGINT;
    -- how far below the oldest claimable group a floor stays (see above)
    c_margin     CONSTANT INTERVAL := interval '250 milliseconds';
    -- the least a floor is raised by (so at most a few raises a second per level)
    c_step_us    CONSTANT BIGINT := 100000::bigint;
    l            INT;
    v_floors     BIGINT[];
    v_scan_from  TIMESTAMPTZ[];
    v_levels     INT[];
    v_positions  TIMESTAMPTZ[];
    v_raise_to   TIMESTAMPTZ;
    v_queue      SMALLINT;
    v_paused     BOOLEAN;
    v_limit      INT;
    v_rate       INT;
    v_period_us  DOUBLE PRECISION;
    v_running    BIGINT;
    v_now_us     BIGINT := (extract(epoch FROM statement_timestamp()) * 1000000)::bigint;
    v_tat_us     DOUBLE PRECISION;
    v_claimed    INT := 0;
    v_rate_reset BOOLEAN := false;
    v_floor_name TEXT;
BEGIN
    IF p_limit NOT BETWEEN 1 AND 10000 OR p_lease_ms NOT BETWEEN 1 AND 86400000
       OR p_min_priority NOT BETWEEN 0 AND 4 OR p_wait_ms NOT BETWEEN 0 AND 3600000 THEN
        RAISE EXCEPTION 'harel_claim: need p_limit in 1..10000, p_lease_ms in 1..86400000, p_min_priority in 0..4, p_wait_ms in 0..3600000'
            USING ERRCODE = '22023';
    END IF;

    SELECT q.id, q.paused_at IS NOT NULL, q.concurrency_limit, q.rate_limit,
           (q.rate_period_ms * 1000)::double precision
      INTO v_queue, v_paused, v_limit, v_rate, v_period_us
      FROM @schema@.queues q
     WHERE q.name = p_queue;
    IF NOT FOUND OR v_paused THEN
        RETURN;
    END IF;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN
        -- one claim of this queue at a time, so that each sees the leases of the last (a
        -- lock only the queue's owner can take, waited for no longer than the caller waits)
        IF p_wait_ms IS NOT NULL THEN
            PERFORM set_config('lock_timeout', GREATEST(p_wait_ms, 1)::text || 'ms', true);
        END IF;
        BEGIN
            PERFORM 1 FROM @schema@.queues q WHERE q.id = v_queue FOR NO KEY UPDATE;
        EXCEPTION
            WHEN lock_not_available THEN
                RETURN;
        END;
        IF v_limit IS NOT NULL THEN
            v_now := clock_timestamp();
            SELECT count(*) INTO v_running
              FROM @schema@.transport_groups g
             WHERE g.limited_queue = v_queue AND g.available_at > v_now
               AND g.locked_by IS NOT NULL;
            v_need := LEAST(v_need, (v_limit - v_running)::int);
        END IF;
        -- The leases start now: after the lock wait, and after the count, whose snapshot
        -- saw every settle committed before it. A lease that takes a freed slot so
        -- starts (and is recorded as started) after the one it replaced ended, however
        -- long this backend was descheduled between the two.
        v_now := clock_timestamp();
        v_expiry := v_now + p_lease_ms * interval '1 millisecond';
        v_now_us := (extract(epoch FROM v_now) * 1000000)::bigint;
        IF v_rate IS NOT NULL THEN
            v_tat_us := GREATEST(COALESCE(pg_sequence_last_value(
                                     ('@schema@.queue_rate_q' || v_queue)::regclass), 0),
                                 v_now_us)::double precision;
            -- ahead by more than a period: a state of an earlier limit (see above); as
            -- if the current limit had just used its last start, and written back so that
            -- the next start comes one interval later
            IF v_tat_us > v_now_us + v_period_us THEN
                v_tat_us := v_now_us + v_period_us;
                v_rate_reset := true;
            END IF;
            v_need := LEAST(v_need,
                            floor((v_now_us + v_period_us - v_tat_us) / (v_period_us / v_rate))::int);
        END IF;
        IF v_need <= 0 THEN
            IF v_rate_reset THEN
                PERFORM setval(('@schema@.queue_rate_q' || v_queue)::regclass,
                               ceil(v_tat_us)::bigint);
            END IF;
            RETURN;
        END IF;
    END IF;

    IF v_queue = 0 THEN
        SELECT ARRAY[f0.last_value, f1.last_value, f2.last_value, f3.last_value, f4.last_value]
          INTO v_floors
          FROM @schema@.claim_floor_0 f0, @schema@.claim_floor_1 f1, @schema@.claim_floor_2 f2,
               @schema@.claim_floor_3 f3, @schema@.claim_floor_4 f4;
    ELSE
        SELECT array_agg(COALESCE(pg_sequence_last_value(
                   ('@schema@.claim_floor_q' || v_queue || '_' || l.level)::regclass), 0)
                   ORDER BY l.level)
          INTO v_floors
          FROM generate_series(0, 4) AS l(level);
    END IF;
    v_floor_name := CASE WHEN v_queue = 0 THEN '@schema@.claim_floor_'
                         ELSE '@schema@.claim_floor_q' || v_queue || '_' END;
    -- a hinted group below a floor: lower the floor for good (not only for this claim,
    -- which may fill up with other groups first), but only to a group of this queue and
    -- level that is there at exactly that position: any login can NOTIFY on the channel
    -- (neither LISTEN nor NOTIFY takes a grant), and a forged position that lowered a
    -- floor would make the claims scan every dead entry above it (one index probe a level,
    -- only when a hint is below a floor)
    IF p_hint IS NOT NULL THEN
        FOR l IN p_min_priority..4 LOOP
            IF p_hint < v_floors[l + 1]
               AND EXISTS (SELECT 1 FROM @schema@.transport_groups g
                            WHERE g.queue_id = v_queue AND g.priority = l
                              AND g.available_at = timestamptz 'epoch'
                                                   + p_hint * interval '1 microsecond') THEN
                PERFORM setval((v_floor_name || l)::regclass, GREATEST(p_hint, 0));
                v_floors[l + 1] := GREATEST(p_hint, 0);
            END IF;
        END LOOP;
    END IF;
    SELECT array_agg(timestamptz 'epoch' + f.floor * interval '1 microsecond'
                     - interval '1 millisecond' ORDER BY f.ord)
      INTO v_scan_from
      FROM unnest(v_floors) WITH ORDINALITY AS f(floor, ord);

    LOOP
        v_rounds := v_rounds + 1;

        -- Lock candidates. This statement only locks: its snapshot may predate the commit
        -- of a transaction that completed a candidate's head (a late ack, or a claim and
        -- ack in one transaction), and the row lock then follows the row to its newest
        -- version, which can be claimable again. The heads must be read by a statement
        -- that starts after the locks are granted.
        SELECT array_agg(c.group_id ORDER BY c.level DESC, c.available_at),
               array_agg(c.level ORDER BY c.level DESC, c.available_at),
               array_agg(c.available_at ORDER BY c.level DESC, c.available_at)
          INTO v_candidates, v_levels, v_positions
          FROM (SELECT p.level, c.group_id, c.available_at
                  FROM generate_series(4, p_min_priority, -1) AS p(level)
                 CROSS JOIN LATERAL (
                        SELECT g.group_id, g.available_at
                          FROM @schema@.transport_groups g
                         WHERE g.queue_id = v_queue
                           AND g.priority = p.level
                           AND g.available_at >= v_scan_from[p.level + 1]
                           AND g.available_at <= v_now
                         ORDER BY g.available_at
                         LIMIT v_need
                           FOR NO KEY UPDATE SKIP LOCKED) AS c
                 LIMIT v_need) AS c;

        -- Raise the floors after the first round's scan, which went through each level in
        -- order: a level that gave candidates up to the one it found first; when fewer than
        -- asked for were found, every level was scanned to the end, and an empty one up to
        -- now.
        IF v_rounds = 1 THEN
            FOR l, v_raise_to IN
                SELECT lv.level,
                       COALESCE(min(x.position),
                                CASE WHEN COALESCE(cardinality(v_candidates), 0) < v_need
                                     THEN v_now END) - c_margin
                  FROM generate_series(p_min_priority, 4) AS lv(level)
                  LEFT JOIN unnest(v_levels, v_positions) AS x(level, position)
                    ON x.level = lv.level
                 GROUP BY lv.level
            LOOP
                -- in steps of c_step at least: each setval writes WAL
                IF (extract(epoch FROM v_raise_to) * 1000000)::bigint
                   > v_floors[l + 1] + c_step_us THEN
                    PERFORM setval((v_floor_name || l)::regclass,
                                   (extract(epoch FROM v_raise_to) * 1000000)::bigint);
                END IF;
            END LOOP;
        END IF;
        EXIT WHEN v_candidates IS NULL;

        -- A new statement, whose snapshot sees every commit made before our locks were
        -- granted: read each candidate's head and settle every candidate. A due head is
        -- leased; an empty group is kept aside for the drop below; a group whose head is not
        -- due yet (a delayed message became head) sleeps until it is.
        WITH candidate AS (
            SELECT g.group_id, g.head_seq, g.head_attempts, g.priority, g.inline_seq,
                   g.inline_kind, g.inline_payload, g.inline_enqueued_at, g.inline_not_before,
                   g.inline_trace_context, g.cancel_requested_at IS NOT NULL AS cancel_requested,
                   k.ord, g.ctid AS row_ctid
              FROM unnest(v_candidates) WITH ORDINALITY AS k(group_id, ord)
              JOIN @schema@.transport_groups g ON g.group_id = k.group_id
             WHERE g.group_id = ANY (v_candidates) -- by key (see harel_settle's fence)
        ), head AS (
            -- the group's inline message (the one that created it) while it has one, else
            -- its first message in transport_messages
            SELECT c.group_id, c.ord, c.row_ctid, c.cancel_requested,
                   COALESCE(c.inline_seq, m.seq) AS seq,
                   COALESCE(c.inline_kind, m.kind) AS kind,
                   COALESCE(c.inline_payload, m.payload) AS payload,
                   CASE WHEN c.inline_seq IS NOT NULL THEN c.priority ELSE m.priority END
                       AS priority,
                   COALESCE(c.inline_enqueued_at, m.enqueued_at) AS enqueued_at,
                   CASE WHEN c.inline_seq IS NOT NULL THEN c.inline_trace_context
                        ELSE m.trace_context END AS trace_context,
                   CASE WHEN c.inline_seq IS NOT NULL THEN c.inline_not_before
                        ELSE m.not_before END AS not_before,
                   COALESCE(c.inline_seq, m.seq) IS NOT NULL AND NOT c.cancel_requested
                       AND (CASE WHEN c.inline_seq IS NOT NULL THEN c.inline_not_before
                                 ELSE m.not_before END IS NULL
                            OR CASE WHEN c.inline_seq IS NOT NULL THEN c.inline_not_before
                                    ELSE m.not_before END <= v_now) AS due,
                   CASE WHEN COALESCE(c.inline_seq, m.seq) = c.head_seq THEN c.head_attempts
                        WHEN c.inline_seq IS NOT NULL THEN 0
                        ELSE m.attempts END + 1 AS attempt
              FROM candidate c
              LEFT JOIN LATERAL (
                    SELECT m.seq, m.kind, m.payload, m.priority, m.enqueued_at, m.not_before,
                           m.attempts, m.trace_context
                      FROM @schema@.transport_messages m
                     WHERE c.inline_seq IS NULL AND m.group_id = c.group_id
                     ORDER BY m.seq
                     LIMIT 1) AS m ON true
        ), settled AS (
            UPDATE @schema@.transport_groups g
               SET locked_by     = CASE WHEN h.due THEN p_token END,
                   available_at  = CASE WHEN h.due THEN v_expiry ELSE h.not_before END,
                   head_seq      = CASE WHEN h.due THEN h.seq ELSE g.head_seq END,
                   head_attempts = CASE WHEN h.due THEN h.attempt ELSE g.head_attempts END,
                   head_started_at = CASE WHEN h.due THEN v_now ELSE g.head_started_at END,
                   limited_queue = CASE WHEN NOT h.due THEN g.limited_queue
                                        WHEN v_limit IS NOT NULL THEN v_queue END
              FROM head h
             -- by the row version the candidate read found (locked by us since the first
             -- statement, so it is still the current one): a TID lookup per row, which no
             -- statistics can turn into a walk of the table or a rescan of the batch
             WHERE g.ctid = h.row_ctid
               AND h.seq IS NOT NULL AND NOT h.cancel_requested
        )
        SELECT array_agg(h.group_id      ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.seq           ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.kind          ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.payload::text ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.attempt       ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.priority      ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.enqueued_at   ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.trace_context ORDER BY h.ord) FILTER (WHERE h.due),
               array_agg(h.group_id)                     FILTER (WHERE h.seq IS NULL),
               array_agg(h.group_id) FILTER (WHERE h.seq IS NOT NULL AND h.cancel_requested),
               count(*) FILTER (WHERE h.seq IS NOT NULL AND NOT h.due AND NOT h.cancel_requested)
          INTO v_groups, v_seqs, v_kinds, v_payloads, v_attempts, v_priority, v_enqueued,
               v_traces, v_empty, v_cancelled, v_not_due
          FROM head h;

        IF v_groups IS NOT NULL THEN
            RETURN QUERY
            SELECT * FROM unnest(v_groups, v_seqs, v_kinds, v_payloads, v_attempts, v_priority,
                                 v_enqueued, v_traces);
            v_need := v_need - cardinality(v_groups);
            v_claimed := v_claimed + cardinality(v_groups);
        END IF;

        -- A lapsed lease of a job whose cancel was asked for while it ran (its worker died
        -- before settling it): it ends as cancelled, never runs again.
        IF v_cancelled IS NOT NULL THEN
            PERFORM @schema@.harel_end_cancelled(v_cancelled);
        END IF;

        -- Done when full, or when nothing odd was met (the queue has no more due groups).
        EXIT WHEN v_need = 0 OR (v_empty IS NULL AND v_not_due = 0 AND v_cancelled IS NULL)
                  OR v_rounds >= 8;

        -- Empty groups: a drain raced a publish, or a stale row. Drop or free them; one whose
        -- publisher is still open is looked at again shortly, never spun on.
        IF v_empty IS NOT NULL THEN
            PERFORM @schema@.harel_drop_empty_groups(v_empty, 200);
        END IF;
    END LOOP;

    -- the starts made count against the rate (setval: outside MVCC and the transaction)
    IF v_rate IS NOT NULL AND (v_claimed > 0 OR v_rate_reset) THEN
        PERFORM setval(('@schema@.queue_rate_q' || v_queue)::regclass,
                       ceil(v_tat_us + v_claimed * (v_period_us / v_rate))::bigint);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @schema@.harel_claim(UUID, BIGINT, INT, INT, BIGINT, TEXT, INT) FROM PUBLIC;
