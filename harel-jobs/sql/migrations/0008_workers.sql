-- harel-jobs migration 0008: the worker pools an operator sees, and what they did lately.
--
-- Each running pool reports itself about every 10 seconds (harel_worker_report): one row in
-- `workers` (where it runs, the queues it serves, its concurrency, its running jobs and its
-- counters since it started), and the counters' increase added to its row of the current
-- minute in `throughput`, from which dashboards draw the last minutes. A pool that stops
-- gracefully says so (`stopped_at`); one that died simply stops being seen. harel_maintain
-- prunes both after a day. A few small writes per pool every 10 seconds: nothing on the
-- paths of enqueue, claim or settle.
--
-- harel_queues also says since when each queue's oldest ready group has waited: a new
-- signature.
DROP FUNCTION IF EXISTS @schema@.harel_queues();

CREATE TABLE @schema@.workers (
    id          UUID        PRIMARY KEY,
    host        TEXT        NOT NULL,
    pid         INT         NOT NULL,
    queues      TEXT[]      NOT NULL,
    concurrency INT         NOT NULL,
    running     INT         NOT NULL,
    succeeded   BIGINT      NOT NULL,
    failed      BIGINT      NOT NULL,
    dead        BIGINT      NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL,
    seen_at     TIMESTAMPTZ NOT NULL,
    stopped_at  TIMESTAMPTZ
);
CREATE INDEX workers_seen_at ON @schema@.workers (seen_at);

CREATE TABLE @schema@.throughput (
    minute    TIMESTAMPTZ NOT NULL,
    worker    UUID        NOT NULL,
    succeeded BIGINT      NOT NULL,
    failed    BIGINT      NOT NULL,
    dead      BIGINT      NOT NULL,
    PRIMARY KEY (minute, worker)
);
