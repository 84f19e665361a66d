-- harel-jobs migration 0005: jobs users can look up, cancel, keep and deduplicate.
--
-- - Look a job up by id: an index on transport_messages' seq; a job published without a
--   group gets a group of its own named after its seq ('own:' and 19 digits: the group's
--   key finds it, and these names sort as the seqs do); the other inline messages (the first
--   message of a named group) have a partial index. So the common job, ungrouped, pays for
--   no new index: a claim's update of its group row writes the same two index entries.
-- - Finished jobs kept for a while (job_history): cancelled jobs always, completed jobs when
--   their type or pool asks for it ("retention"). Pruned by harel_maintain in batches.
-- - Cancel a running job: the request waits on the group row until the handler returns
--   (the heartbeat tells its worker; the settle turns any outcome into "cancelled").
-- - Unique jobs: unique_keys holds each key's job while the job is queued (and, when asked,
--   for a while after it completed).
--
-- Three functions change their signature (harel_publish takes unique keys, harel_extend
-- and harel_maintain return more columns): the old ones are dropped here and the new ones
-- created from sql/functions/ after this migration; `migrate` gives every role that could
-- execute an old one the same right on the new one.
DROP FUNCTION IF EXISTS "harel".harel_publish(
    TEXT[], TEXT[], TEXT[], SMALLINT[], TIMESTAMPTZ[], BIGINT[]);
DROP FUNCTION IF EXISTS "harel".harel_extend(TEXT[], BIGINT[], UUID[], BIGINT);
DROP FUNCTION IF EXISTS "harel".harel_maintain();

ALTER TABLE "harel".transport_groups
    -- when the current attempt of the head began (set by the claim): a retained job's
    -- duration, a running job's "since"
    ADD COLUMN head_started_at     TIMESTAMPTZ,
    -- a cancel of the running head asked for: the settle of its lease ends it as cancelled
    ADD COLUMN cancel_requested_at TIMESTAMPTZ,
    ADD COLUMN cancel_reason       TEXT,
    -- how long the cancelled job is kept in job_history
    ADD COLUMN cancel_keep_ms      BIGINT,
    ADD COLUMN inline_unique_key   TEXT;

ALTER TABLE "harel".transport_messages ADD COLUMN unique_key TEXT;

-- A job by its id, wherever it is queued.
CREATE INDEX transport_messages_by_id ON "harel".transport_messages (seq);
CREATE INDEX transport_groups_by_inline_id ON "harel".transport_groups (inline_seq)
    WHERE inline_seq IS NOT NULL AND group_id <> 'own:' || lpad(inline_seq::text, 19, '0');

CREATE TABLE "harel".job_history (
    id            BIGINT      PRIMARY KEY,  -- the job's id (its message's seq)
    group_id      TEXT        NOT NULL,
    kind          TEXT        NOT NULL,
    payload       JSON        NOT NULL,
    priority      SMALLINT    NOT NULL,
    state         TEXT        NOT NULL CHECK (state IN ('completed', 'cancelled')),
    -- attempts started, the last one included (0: cancelled before it ever ran)
    attempts      INT         NOT NULL,
    last_error    TEXT,
    enqueued_at   TIMESTAMPTZ NOT NULL,
    -- when the last attempt began (NULL: it never ran, or a release before 0005 claimed it)
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ NOT NULL,
    cancel_reason TEXT,
    -- pruned by harel_maintain after this time
    keep_until    TIMESTAMPTZ NOT NULL
);

CREATE INDEX job_history_keep_until ON "harel".job_history (keep_until);

CREATE TABLE "harel".unique_keys (
    key        TEXT        PRIMARY KEY,
    -- the job that holds the key
    job_id     BIGINT      NOT NULL,
    -- NULL: the key is free once the job leaves the queue; else it stays held this long
    -- after the job completed ("at most once per period")
    hold_ms    BIGINT,
    -- set when the job completed with hold_ms: the key is free after this time
    held_until TIMESTAMPTZ
);

CREATE INDEX unique_keys_held_until ON "harel".unique_keys (held_until)
    WHERE held_until IS NOT NULL;
