-- harel-jobs migration 0006: periodic jobs.
--
-- One row per schedule name that a worker declared (WorkerBuilder::periodic): the last tick
-- any worker enqueued, which harel_schedule_fire moves forward atomically with the enqueue,
-- so a tick is enqueued once however many workers declare the schedule. A schedule no
-- worker declares any more keeps its row (its last tick) until it is deleted.
CREATE TABLE @schema@.schedules (
    name       TEXT        PRIMARY KEY,
    -- how the schedule was last declared (cron expression and time zone, or interval)
    spec       TEXT        NOT NULL,
    last_tick  TIMESTAMPTZ,
    -- the tick after last_tick, as the worker that enqueued it computed it
    next_tick  TIMESTAMPTZ,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
