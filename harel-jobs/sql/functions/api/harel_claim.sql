-- harel_claim: leases up to p_limit groups of one queue and returns the head message of
-- each: highest priority first, then, within a level, the lowest start tags (weighted fair
-- share between fairness keys, round-robin between a key's groups: ADR 0030). A worker's
-- entry point.
--
-- Takes:
--   p_token         the lease token the groups get
--   p_lease_ms      the lease, 1 ms to 24 h, from statement_timestamp() on the database's
--                   clock: workers pass durations, never times (not now(): a claim late in
--                   a long transaction would get a lease already over)
--   p_limit         at most this many groups, 1 to 10,000
--   p_min_priority  the lowest level claimed, 0 to 4
--   p_hint          a position from a publisher's NOTIFY (harel_notify): a tag less 2^62
--                   for a group that committed below its level's ready floor, microseconds
--                   since the epoch for one below its claim floor, or NULL
--   p_queue         the queue's name
--   p_wait_ms       how long to wait for a limited queue's lock, 0 to 1 h (NULL: 10 s);
--                   the worker passes half its database timeout
-- Returns one row per leased group, in claim order:
--   group_id, seq   the group and its head message (the job's id)
--   kind, payload   the job
--   attempt         this attempt's number, counted here, before the handler runs (a worker
--                   that dies mid-job has used it)
--   priority, enqueued_at, trace_context   the head's (trace_context NULL for most jobs)
-- Fence: nothing for a paused queue or one nothing was published into, nor for a limited
--   queue whose lock is not granted within p_wait_ms (the server gives up before the
--   worker, so a claim the worker abandoned never leases afterwards). A limited queue gives
--   at most its concurrency limit less its live leases, and at most the starts its rate
--   allows now (GCRA: a burst of up to the limit after a quiet period). A key-limited queue
--   gives each fairness key at most its limit less its live leases; the key's other due
--   candidates are parked: kept in the ready domain in their order, their tags raised into
--   the band above 2^62, behind everything that can start (harel_unpark gives them back as
--   the key's leases end; a claim that reaches the band leases those whose key has room).
--   A head not due, or whose cancel was asked for, is not leased.
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on the candidate group rows: it never waits for
--   them, concurrent claims lease different groups, and a publisher's KEY SHARE does not
--   conflict. A limited or key-limited queue's row in `queues`, FOR NO KEY UPDATE, waited for at most
--   p_wait_ms (lock_timeout, restored at the function's end): that queue's claims run one
--   at a time, each seeing the leases of the one before; other queues never take it.
-- Indexes: transport_groups_timed (queue_id, priority, available_at) WHERE fair_tag IS
--   NULL: per level one range scan in index order from the level's claim floor to now,
--   stopping after p_limit rows; transport_groups_ready (queue_id, priority, fair_tag):
--   per level one range scan from the level's ready floor, stopping after p_limit rows (no
--   sort; the cost does not grow with the waiting groups, nor with the number of keys, nor
--   with the dead entries an old snapshot keeps below the floors); harel_fair_tags' probes
--   for the groups it promotes. transport_groups' key for the
--   candidates (written by TID); transport_messages' key (group_id, seq) for a group's
--   first message; transport_groups_limited for a limited queue's live leases,
--   transport_groups_limited_by_key for a key-limited queue's per candidate key (unlimited
--   queues write no entry in either). Runs with enable_seqscan = off: on a small table the
--   planner would compare every row with the whole candidate array.
-- Errors: 22023 for arguments out of range.
--
-- Steps:
--   1. Check the arguments; read the queue by name (none, or paused: return).
--   2. A limited or key-limited queue: lock its row (not granted within p_wait_ms: return); count its live
--      leases; start the leases after the lock and the count (clock_timestamp()); read the
--      rate's theoretical arrival time from queue_rate_q<N>, brought back to one period
--      ahead if it is further (a state of an earlier limit: a changed limit applies from
--      the next claim); nothing allowed: return.
--   3. Read the level floors (claim_floor_<level> for 'default', claim_floor_q<N>_<level>
--      otherwise), and the queue's fair share state: its ready floor, mark, greatest tag
--      started and last step (fair_floor_q<N>, fair_mark_q<N>, fair_v_q<N>,
--      fair_step_q<N>). A hint below a floor lowers it for good, but only to a group of
--      this queue that is at exactly that position (any login may NOTIFY).
--   4. Lock the due timed groups: per level from 4 down, up to 256 (or p_limit if more),
--      SKIP LOCKED (delays that ended, lapsed leases, retries whose backoff is over). This statement only locks: its
--      snapshot may predate the commit that changed a candidate.
--   5. After the first round's scan, raise each level's claim floor to 250 ms below the
--      oldest group it found there (below now for a level with none, when the scan was not
--      cut short), by at least 100 ms (each setval writes WAL). Below the floor is only
--      what is dead, leased until later, or committed more than 250 ms after it was written
--      (its NOTIFY hint or harel_maintain's sweep brings it back).
--   6. Promote the locked groups that are still timed and due into the ready domain: a new
--      statement reads their keys, harel_fair_tags tags them, in the order they became due.
--   7. Lock candidates in the ready domain: per level from 4 down, the lowest tags from the
--      ready floor, SKIP LOCKED (our own promoted groups included).
--   8. After the first round's ready scan, at most every 250 ms: raise the ready floor to
--      the greatest tag started marked at the step before, or to a level's lowest ready tag
--      if lower (one probe per level), and mark the current one. A tag is drawn after its
--      transaction read the virtual time, so only a transaction that ran 250 ms or more
--      falls below (its NOTIFY hint or harel_maintain's sweep brings it back).
--   9. A key-limited queue: each candidate key's room (its limit less its live leases).
--      A new statement, whose snapshot sees every commit before the locks: read each
--      candidate's head (its inline message, else its first message) and update the row by
--      TID: a due head whose key has room is leased, one whose key has none is parked (token, lease end, head, attempt, start, limited_queue,
--      out of the ready domain); a group whose head is not due sleeps until it is (timed);
--      empty groups and lapsed leases whose cancel was asked for are set aside. The
--      queue's greatest tag started goes up to the greatest this claim started (setval).
--  10. Return the leased heads; end the cancelled ones (harel_end_cancelled); drop or free
--      the empty groups (harel_drop_empty_groups). Another round while short of p_limit
--      and this one met an empty group, a head not due or a cancelled lease (at most 8), or
--      set groups aside for their keys' limits (at most 64).
--  11. A rate-limited queue: its theoretical arrival time advanced by the starts made
--      (setval: outside MVCC and the transaction).
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
    v_positions  TIMESTAMPTZ[];
    v_raise_to   TIMESTAMPTZ;
    v_queue      SMALLINT;
    v_paused     BOOLEAN;
    v_limit      INT;
    v_rate       INT;
    v_key_limit  INT;
    v_key_rate   INT;
    v_key_period_us DOUBLE PRECISION;
    -- a limit per key of either kind
    v_keyed      BOOLEAN;
    -- per distinct candidate key of a round (in key order, bytewise): its room, whether the
    -- rate is what bounds it, its theoretical arrival time brought to now, its last slot
    v_room       BIGINT[];
    v_key_defer  BOOLEAN[];
    v_key_tats   DOUBLE PRECISION[];
    v_key_slots  BIGINT[];
    -- per candidate of a round (by its place in v_candidates): its place among its key's
    -- candidates, its key's room, whether the rate bounds that room, its key's arrival time
    -- brought to now, last slot and number of candidates
    v_c_rank     BIGINT[];
    v_c_room     BIGINT[];
    v_c_rated    BOOLEAN[];
    v_c_tat      DOUBLE PRECISION[];
    v_c_slot     BIGINT[];
    v_c_count    BIGINT[];
    v_parked     BIGINT;
    v_deferred   BIGINT;
    v_taken_keys TEXT[];
    v_defer_keys TEXT[];
    v_defer_slots BIGINT[];
    -- per taken (with a rate) and per deferred candidate: its key's arrival time and last
    -- slot (aligned with v_taken_keys and v_defer_keys)
    v_taken_tats  DOUBLE PRECISION[];
    v_taken_key_slots BIGINT[];
    v_defer_tats  DOUBLE PRECISION[];
    v_defer_key_slots BIGINT[];
    v_period_us  DOUBLE PRECISION;
    v_running    BIGINT;
    v_now_us     BIGINT := (extract(epoch FROM statement_timestamp()) * 1000000)::bigint;
    v_tat_us     DOUBLE PRECISION;
    v_claimed    INT := 0;
    v_rate_reset BOOLEAN := false;
    v_floor_name TEXT;
    v_timed      TEXT[];
    v_timed_levels INT[];
    v_promoted   TID[];
    v_promoted_tags BIGINT[];
    v_promoted_levels SMALLINT[];
    v_promoted_keys TEXT[];
    v_fair_floor BIGINT;
    v_mark       BIGINT;
    v_v          BIGINT;
    v_step_us    BIGINT;
    v_fair_name  TEXT := '@schema@.fair_';
    v_top        BIGINT;
    v_tag        BIGINT;
    v_lowest     BIGINT;
    v_started_top BIGINT;
    -- how many due timed groups a round promotes at most: all that came due since the last
    -- claim as a rule, so that they take their places in their keys' lines together, not a
    -- claim's worth at a time behind the groups tagged meanwhile
    v_promote    INT;
    -- a tag's position in a NOTIFY (see harel_notify)
    c_hint_base  CONSTANT BIGINT := 4611686018427387904;
    -- the parked band: a group whose key has no room is parked in the ready domain with its
    -- tag plus this (2^62: above every start tag), behind every group that can start
    c_parked     CONSTANT BIGINT := 4611686018427387904;
    -- the least time between two raises of the ready floors (see above)
    c_fair_step_us CONSTANT BIGINT := 250000::bigint;
BEGIN
    IF p_limit NOT BETWEEN 1 AND 10000 OR p_lease_ms NOT BETWEEN 1 AND 86400000
       OR p_min_priority NOT BETWEEN 0 AND 4 OR p_wait_ms NOT BETWEEN 0 AND 3600000 THEN
        RAISE EXCEPTION 'harel_claim: need p_limit in 1..10000, p_lease_ms in 1..86400000, p_min_priority in 0..4, p_wait_ms in 0..3600000'
            USING ERRCODE = '22023';
    END IF;

    SELECT q.id, q.paused_at IS NOT NULL, q.concurrency_limit, q.rate_limit,
           (q.rate_period_ms * 1000)::double precision, q.key_concurrency_limit,
           q.key_rate_limit, (q.key_rate_period_ms * 1000)::double precision
      INTO v_queue, v_paused, v_limit, v_rate, v_period_us, v_key_limit, v_key_rate,
           v_key_period_us
      FROM @schema@.queues q
     WHERE q.name = p_queue;
    IF NOT FOUND OR v_paused THEN
        RETURN;
    END IF;
    v_keyed := v_key_limit IS NOT NULL OR v_key_rate IS NOT NULL;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL OR v_keyed THEN
        -- one claim of this queue at a time, so that each sees the leases of the last (a
        -- lock only the queue's owner can take, waited for no longer than the caller waits)
        -- (SET LOCAL rather than set_config: on Citus, where migrate gives this function
        -- citus.propagate_set_commands = 'local', the bound then reaches the worker node
        -- that holds the queue's row, as the function's own SET clause does not; on either,
        -- the SET clause restores the caller's value when the function returns)
        -- (NULL: the function's own 10 s. Not GREATEST(p_wait_ms, 1) alone: GREATEST skips
        -- a NULL, which made that 1 ms for the rest of the call)
        EXECUTE format('SET LOCAL lock_timeout = %L',
                       CASE WHEN p_wait_ms IS NULL THEN current_setting('lock_timeout')
                            ELSE GREATEST(p_wait_ms, 1)::text || 'ms' END);
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
    v_fair_floor := COALESCE(pg_sequence_last_value(
                        (v_fair_name || 'floor_q' || v_queue)::regclass), 0);
    v_mark := COALESCE(pg_sequence_last_value((v_fair_name || 'mark_q' || v_queue)::regclass), 0);
    v_v := COALESCE(pg_sequence_last_value((v_fair_name || 'v_q' || v_queue)::regclass), 0);
    v_step_us := COALESCE(pg_sequence_last_value(
                     (v_fair_name || 'step_q' || v_queue)::regclass), 0);
    IF p_hint IS NOT NULL AND p_hint < 0 THEN
        -- a tag: the same rule for the ready floor
        v_tag := p_hint + c_hint_base;
        IF v_tag >= 0 AND v_tag < v_fair_floor
           AND EXISTS (SELECT 1 FROM generate_series(0, 4) AS l(level)
                        WHERE EXISTS (SELECT 1 FROM @schema@.transport_groups g
                                       WHERE g.queue_id = v_queue AND g.priority = l.level
                                         AND g.fair_tag = v_tag)) THEN
            PERFORM setval((v_fair_name || 'floor_q' || v_queue)::regclass, v_tag);
            v_fair_floor := v_tag;
        END IF;
    ELSIF p_hint IS NOT NULL THEN
        FOR l IN p_min_priority..4 LOOP
            IF p_hint < v_floors[l + 1]
               AND EXISTS (SELECT 1 FROM @schema@.transport_groups g
                            WHERE g.queue_id = v_queue AND g.priority = l
                              AND g.fair_tag IS NULL
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
        v_promote := GREATEST(v_need, 256);

        -- Lock the due timed groups. This statement only locks: its snapshot may predate
        -- the commit of a transaction that changed a candidate (a late ack, or a claim and
        -- ack in one transaction), and the row lock then follows the row to its newest
        -- version. Whether it is still timed and due is read by a statement that starts
        -- after the locks are granted.
        SELECT array_agg(c.group_id ORDER BY c.level DESC, c.available_at),
               array_agg(c.level ORDER BY c.level DESC, c.available_at),
               array_agg(c.available_at ORDER BY c.level DESC, c.available_at)
          INTO v_timed, v_timed_levels, v_positions
          FROM (SELECT p.level, c.group_id, c.available_at
                  FROM generate_series(4, p_min_priority, -1) AS p(level)
                 CROSS JOIN LATERAL (
                        SELECT g.group_id, g.available_at
                          FROM @schema@.transport_groups g
                         WHERE g.queue_id = v_queue
                           AND g.priority = p.level
                           AND g.fair_tag IS NULL
                           AND g.available_at >= v_scan_from[p.level + 1]
                           AND g.available_at <= v_now
                         ORDER BY g.available_at
                         LIMIT v_promote
                           FOR NO KEY UPDATE SKIP LOCKED) AS c
                 LIMIT v_promote) AS c;

        -- Raise the floors after the first round's scan, which went through each level in
        -- order: a level that gave candidates up to the one it found first; when fewer than
        -- asked for were found, every level was scanned to the end, and an empty one up to
        -- now.
        IF v_rounds = 1 THEN
            FOR l, v_raise_to IN
                SELECT lv.level,
                       COALESCE(min(x.position),
                                CASE WHEN COALESCE(cardinality(v_timed), 0) < v_promote
                                     THEN v_now END) - c_margin
                  FROM generate_series(p_min_priority, 4) AS lv(level)
                  LEFT JOIN unnest(v_timed_levels, v_positions) AS x(level, position)
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

        -- Promote the locked groups still timed and due into the ready domain, tagged in the
        -- order they became due (a new statement: it sees their newest versions).
        IF v_timed IS NOT NULL THEN
            -- (harel_fair_tags called from a statement of its own: on Citus a statement
            -- that reads the schema's tables runs whole on the worker node, and the
            -- function with it, where the schema's sequences do not exist)
            SELECT array_agg(t.row_ctid ORDER BY t.ord),
                   array_agg(t.priority ORDER BY t.ord),
                   array_agg(t.fair_key ORDER BY t.ord)
              INTO v_promoted, v_promoted_levels, v_promoted_keys
              FROM unnest(v_timed) WITH ORDINALITY AS k(group_id, ord)
             CROSS JOIN LATERAL (SELECT k.ord, g.priority, g.fair_key, g.ctid AS row_ctid
                                   FROM @schema@.transport_groups g
                                  WHERE g.group_id = k.group_id AND g.fair_tag IS NULL
                                    AND g.available_at <= v_now
                                 OFFSET 0) AS t;
            IF v_promoted IS NOT NULL THEN
                v_promoted_tags := @schema@.harel_fair_tags(
                    array_fill(v_queue, ARRAY[cardinality(v_promoted)]),
                    v_promoted_levels, v_promoted_keys);
                UPDATE @schema@.transport_groups g
                   SET fair_tag = p.tag
                  FROM unnest(v_promoted, v_promoted_tags) AS p(row_ctid, tag)
                 WHERE g.ctid = p.row_ctid;
            END IF;
        END IF;

        -- Lock candidates in the ready domain, lowest tags first (the groups just promoted
        -- are ours already). Only locks, as above.
        SELECT array_agg(c.group_id ORDER BY c.level DESC, c.fair_tag)
          INTO v_candidates
          FROM (SELECT p.level, c.group_id, c.fair_tag
                  FROM generate_series(4, p_min_priority, -1) AS p(level)
                 CROSS JOIN LATERAL (
                        SELECT g.group_id, g.fair_tag
                          FROM @schema@.transport_groups g
                         WHERE g.queue_id = v_queue
                           AND g.priority = p.level
                           AND g.fair_tag >= v_fair_floor
                         ORDER BY g.fair_tag
                         LIMIT v_need
                           FOR NO KEY UPDATE SKIP LOCKED) AS c
                 LIMIT v_need) AS c;

        -- The ready floor, at most every c_fair_step_us: up to the greatest tag started
        -- that the last step marked, or to a level's lowest ready tag if lower (a level
        -- that higher ones starve keeps its own low tags); the current one is marked for
        -- the next step.
        IF v_rounds = 1 AND v_now_us - v_step_us >= c_fair_step_us THEN
            SELECT min((SELECT g.fair_tag FROM @schema@.transport_groups g
                         WHERE g.queue_id = v_queue AND g.priority = l.level
                           AND g.fair_tag >= v_fair_floor
                         ORDER BY g.fair_tag
                         LIMIT 1))
              INTO v_lowest
              FROM generate_series(0, 4) AS l(level);
            v_top := LEAST(v_mark, v_lowest);
            IF v_top > v_fair_floor THEN
                PERFORM setval((v_fair_name || 'floor_q' || v_queue)::regclass, v_top);
            END IF;
            IF v_v > v_mark THEN
                PERFORM setval((v_fair_name || 'mark_q' || v_queue)::regclass, v_v);
            END IF;
            PERFORM setval((v_fair_name || 'step_q' || v_queue)::regclass, v_now_us);
        END IF;
        EXIT WHEN v_candidates IS NULL;

        -- A key-limited queue: each candidate key's room, counted after the queue's lock:
        -- its running limit less its live leases (those of earlier rounds included), and
        -- the starts its rate allows now (GCRA, its state in key_rates; one further ahead
        -- than a period is a previous limit's, brought back to one period)
        IF v_keyed THEN
            -- (in key order, bytewise: the statement below finds a candidate's key by its
            -- rank in that order)
            SELECT array_agg(LEAST(c.room, r.room) ORDER BY k.fair_key COLLATE "C"),
                   array_agg(r.room IS NOT NULL AND (c.room IS NULL OR r.room < c.room)
                             ORDER BY k.fair_key COLLATE "C"),
                   array_agg(r.tat ORDER BY k.fair_key COLLATE "C"),
                   array_agg(r.slot ORDER BY k.fair_key COLLATE "C")
              INTO v_room, v_key_defer, v_key_tats, v_key_slots
              FROM (SELECT DISTINCT g.fair_key
                      FROM @schema@.transport_groups g
                     WHERE g.group_id = ANY (v_candidates)) AS k
             CROSS JOIN LATERAL (
                    SELECT v_key_limit
                           - (SELECT count(*) FROM @schema@.transport_groups l
                               WHERE l.limited_queue = v_queue AND l.fair_key = k.fair_key
                                 AND l.available_at > v_now AND l.locked_by IS NOT NULL)
                           AS room) AS c
             CROSS JOIN LATERAL (
                    SELECT t.tat, t.slot,
                           floor((v_now_us + v_key_period_us - t.tat)
                                 / (v_key_period_us / v_key_rate))::bigint AS room
                      FROM (SELECT LEAST(GREATEST(COALESCE(max(kr.tat_us), 0), v_now_us)
                                             ::double precision,
                                         v_now_us + v_key_period_us) AS tat,
                                   COALESCE(max(kr.slot_us), 0) AS slot
                              FROM @schema@.key_rates kr
                             WHERE kr.queue_id = v_queue AND kr.key = k.fair_key) AS t
                  ) AS r;
            -- each candidate's place among its key's (in claim order: a candidate whose head
            -- turns out not due still takes its place, so its key may start one fewer this
            -- round), and its key's figures: its key's place among the distinct keys, in the
            -- order above, is its dense rank (not array_position, a walk of the keys per
            -- candidate: 10,000 candidates of as many keys took 2.3 s)
            SELECT array_agg(x.rank ORDER BY x.ord), array_agg(v_room[x.i] ORDER BY x.ord),
                   array_agg(v_key_defer[x.i] ORDER BY x.ord),
                   array_agg(v_key_tats[x.i] ORDER BY x.ord),
                   array_agg(v_key_slots[x.i] ORDER BY x.ord), array_agg(x.n ORDER BY x.ord)
              INTO v_c_rank, v_c_room, v_c_rated, v_c_tat, v_c_slot, v_c_count
              FROM (SELECT c.ord,
                           dense_rank() OVER (ORDER BY c.fair_key COLLATE "C") AS i,
                           row_number() OVER (PARTITION BY c.fair_key ORDER BY c.ord) AS rank,
                           count(*) OVER (PARTITION BY c.fair_key) AS n
                      FROM unnest(v_candidates) WITH ORDINALITY AS k(group_id, ord)
                      LEFT JOIN LATERAL (SELECT k.ord, g.fair_key
                                           FROM @schema@.transport_groups g
                                          WHERE g.group_id = k.group_id
                                         OFFSET 0) AS c ON true) AS x;
            -- the leases start after the count, as a limited queue's do (see above): one
            -- that takes a slot a settle freed starts after that settle, however long this
            -- backend was descheduled before the count
            -- (and a rate's arrival time counts from that start: the starts recorded keep
            -- to the rate)
            v_now := clock_timestamp();
            v_expiry := v_now + p_lease_ms * interval '1 millisecond';
            v_now_us := (extract(epoch FROM v_now) * 1000000)::bigint;
        END IF;

        -- A new statement, whose snapshot sees every commit made before our locks were
        -- granted: read each candidate's head and settle every candidate. A due head is
        -- leased; an empty group is kept aside for the drop below; a group whose head is not
        -- due yet (a delayed message became head) sleeps until it is.
        WITH candidate AS (
            SELECT g.group_id, g.head_seq, g.head_attempts, g.priority, g.inline_seq,
                   g.inline_kind, g.inline_payload, g.inline_enqueued_at, g.inline_not_before,
                   g.inline_trace_context, g.cancel_requested_at IS NOT NULL AS cancel_requested,
                   g.fair_tag, g.fair_key, k.ord, g.ctid AS row_ctid,
                   -- a key-limited queue: whether its key has room for it if its head is
                   -- due; past that room, whether the rate is what bounds it (deferred: to
                   -- one interval after the key's arrival time less a period once this
                   -- round's starts are counted, or after the last start time given, each
                   -- one interval after the one before), else parked
                   NOT v_keyed OR v_c_rank[k.ord] <= v_c_room[k.ord] AS has_room,
                   v_keyed AND v_c_rank[k.ord] > v_c_room[k.ord] AND v_c_rated[k.ord]
                       AS rate_waits,
                   CASE WHEN v_keyed AND v_c_rated[k.ord] THEN
                       ceil(GREATEST(GREATEST(v_c_tat[k.ord], v_now_us)
                                     + (LEAST(GREATEST(v_c_room[k.ord], 0), v_c_count[k.ord])
                                        + 1) * (v_key_period_us / v_key_rate)
                                     - v_key_period_us,
                                     v_c_slot[k.ord] + v_key_period_us / v_key_rate)
                            + (v_c_rank[k.ord] - GREATEST(v_c_room[k.ord], 0) - 1)
                              * (v_key_period_us / v_key_rate))::bigint
                   END AS slot_us
              FROM unnest(v_candidates) WITH ORDINALITY AS k(group_id, ord)
              JOIN @schema@.transport_groups g ON g.group_id = k.group_id
             WHERE g.group_id = ANY (v_candidates) -- by key (see harel_settle's fence)
        ), head AS (
            -- the group's inline message (the one that created it) while it has one, else
            -- its first message in transport_messages
            SELECT c.group_id, c.ord, c.row_ctid, c.cancel_requested, c.fair_tag, c.fair_key,
                   c.has_room, c.rate_waits, c.slot_us,
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
        ), decided AS (
            -- a due head is taken while its key has room, deferred past the rate, parked
            -- past the running limit (see above)
            SELECT h.*, h.due AND h.has_room AS take, h.due AND h.rate_waits AS deferred
              FROM head h
        ), settled AS (
            UPDATE @schema@.transport_groups g
               SET locked_by     = CASE WHEN h.take THEN p_token END,
                   available_at  = CASE WHEN h.take THEN v_expiry
                                        -- (timestamp + interval AT TIME ZONE 'UTC',
                                        -- immutable, where timestamptz + interval is
                                        -- stable: Citus takes no non-immutable function in
                                        -- a modification's CASE)
                                        WHEN h.deferred
                                        THEN (timestamp 'epoch'
                                              + h.slot_us * interval '1 microsecond')
                                             AT TIME ZONE 'UTC'
                                        WHEN h.due THEN g.available_at
                                        ELSE h.not_before END,
                   head_seq      = CASE WHEN h.take THEN h.seq ELSE g.head_seq END,
                   head_attempts = CASE WHEN h.take THEN h.attempt ELSE g.head_attempts END,
                   head_started_at = CASE WHEN h.take THEN v_now ELSE g.head_started_at END,
                   -- leased, deferred, or asleep until its head is due: timed; parked: in
                   -- the band, in its order
                   fair_tag      = CASE WHEN h.take OR h.deferred OR NOT h.due THEN NULL
                                        ELSE h.fair_tag % c_parked + c_parked END,
                   limited_queue = CASE WHEN NOT h.take THEN g.limited_queue
                                        WHEN v_limit IS NOT NULL OR v_key_limit IS NOT NULL
                                        THEN v_queue END
              FROM decided h
             -- by the row version the candidate read found (locked by us since the first
             -- statement, so it is still the current one): a TID lookup per row, which no
             -- statistics can turn into a walk of the table or a rescan of the batch
             WHERE g.ctid = h.row_ctid
               AND h.seq IS NOT NULL AND NOT h.cancel_requested
               -- (one parked already: no write)
               AND (h.take OR h.deferred OR NOT h.due OR h.fair_tag < c_parked)
        )
        SELECT array_agg(h.group_id      ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.seq           ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.kind          ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.payload::text ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.attempt       ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.priority      ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.enqueued_at   ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.trace_context ORDER BY h.ord) FILTER (WHERE h.take),
               array_agg(h.group_id)                     FILTER (WHERE h.seq IS NULL),
               array_agg(h.group_id) FILTER (WHERE h.seq IS NOT NULL AND h.cancel_requested),
               count(*) FILTER (WHERE h.seq IS NOT NULL AND NOT h.due AND NOT h.cancel_requested),
               max(h.fair_tag % c_parked) FILTER (WHERE h.take),
               count(*) FILTER (WHERE h.due AND NOT h.take AND NOT h.deferred
                                  AND h.fair_tag < c_parked),
               count(*) FILTER (WHERE h.deferred),
               array_agg(h.fair_key) FILTER (WHERE h.take AND v_key_rate IS NOT NULL),
               array_agg(h.fair_key) FILTER (WHERE h.deferred),
               array_agg(h.slot_us) FILTER (WHERE h.deferred),
               -- their keys' arrival times and last slots, in the same order (for key_rates)
               array_agg(v_c_tat[h.ord]) FILTER (WHERE h.take AND v_key_rate IS NOT NULL),
               array_agg(v_c_slot[h.ord]) FILTER (WHERE h.take AND v_key_rate IS NOT NULL),
               array_agg(v_c_tat[h.ord]) FILTER (WHERE h.deferred),
               array_agg(v_c_slot[h.ord]) FILTER (WHERE h.deferred)
          INTO v_groups, v_seqs, v_kinds, v_payloads, v_attempts, v_priority, v_enqueued,
               v_traces, v_empty, v_cancelled, v_not_due, v_started_top, v_parked, v_deferred,
               v_taken_keys, v_defer_keys, v_defer_slots, v_taken_tats, v_taken_key_slots,
               v_defer_tats, v_defer_key_slots
          FROM decided h;

        -- a key's rate state: its arrival time advanced by the starts made, its last slot
        -- by the groups deferred (in this transaction: a claim that rolls back leaves both)
        IF v_taken_keys IS NOT NULL OR v_defer_keys IS NOT NULL THEN
            INSERT INTO @schema@.key_rates AS kr (queue_id, key, tat_us, slot_us)
            -- (a key's arrival time and last slot are the same on each of its candidates)
            SELECT v_queue, u.key,
                   ceil(GREATEST(u.tat, v_now_us)
                        + u.starts * (v_key_period_us / v_key_rate))::bigint,
                   GREATEST(u.key_slot, COALESCE(u.slot, 0))
              FROM (SELECT t.key, sum(t.starts) AS starts, max(t.slot) AS slot,
                           max(t.tat) AS tat, max(t.key_slot) AS key_slot
                      FROM (SELECT tk.key, 1 AS starts, NULL::bigint AS slot, tk.tat,
                                   tk.key_slot
                              FROM unnest(v_taken_keys, v_taken_tats, v_taken_key_slots)
                                   AS tk(key, tat, key_slot)
                            UNION ALL
                            SELECT dk.key, 0, dk.slot, dk.tat, dk.key_slot
                              FROM unnest(v_defer_keys, v_defer_slots, v_defer_tats,
                                          v_defer_key_slots)
                                   AS dk(key, slot, tat, key_slot)) AS t
                     GROUP BY t.key) AS u
            ON CONFLICT (queue_id, key) DO UPDATE
               SET tat_us = excluded.tat_us,
                   slot_us = GREATEST(kr.slot_us, excluded.slot_us);
        END IF;

        -- the queue's greatest tag started (outside MVCC; two claims racing may leave the
        -- lesser of their tops: a bounded step back)
        IF v_started_top > v_v THEN
            PERFORM setval((v_fair_name || 'v_q' || v_queue)::regclass, v_started_top);
            v_v := v_started_top;
        END IF;

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
        -- (a round that set groups aside for their keys' limits may be followed by up to
        -- 64 in all: a saturated key's backlog ranked ahead of other keys' work is set aside
        -- a round's candidates at a time, and a claim that came back short would make its
        -- worker wait for the next poll)
        EXIT WHEN v_need = 0
                  OR (v_empty IS NULL AND v_not_due = 0 AND v_cancelled IS NULL
                      AND v_parked = 0 AND v_deferred = 0)
                  OR v_rounds >= CASE WHEN v_parked + v_deferred > 0 THEN 64 ELSE 8 END;

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
