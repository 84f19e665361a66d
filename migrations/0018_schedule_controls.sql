-- harel-jobs migration 0018: operators pause, resume and trigger periodic schedules
-- (issue 30).
--
-- - `schedules.paused_at`: set while an operator paused the schedule (harel_schedule_control
--   'pause'). harel_schedule_fire then enqueues no tick: a paused tick counts as passed
--   (last_tick moves on, no job), so no worker catches up on it later. Resuming moves
--   last_tick to at least the resume time, so a worker that starts after it does not
--   count the paused ticks as missed either: after a resume, the next tick is the next
--   one to come.
-- - `schedules.trigger_requested_at`: an operator's request to fire the schedule once now,
--   besides its ticks. The database cannot make the job (a worker's closure does), so the
--   request waits here; the next pass of any worker declaring the schedule claims it in
--   harel_schedule_fire (p_trigger: the row's request, cleared in the same statement, so
--   one worker fires it) and enqueues its job, with the request's time as the tick.
--
-- harel_schedule_fire takes `p_trigger` (a new argument, default NULL: the previous
-- release's workers call the new one unchanged, and fire ticks only) and harel_schedules
-- returns two more columns: new signatures, the old ones dropped here (`migrate` gives
-- every role that could execute them the same right on the new ones).
DROP FUNCTION IF EXISTS "harel".harel_schedule_fire(
    TEXT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ, TEXT, TEXT, TEXT, SMALLINT, TEXT, TEXT, BIGINT);
DROP FUNCTION IF EXISTS "harel".harel_schedules(TEXT[], TEXT, INT);

ALTER TABLE "harel".schedules
    ADD COLUMN paused_at            TIMESTAMPTZ,
    ADD COLUMN trigger_requested_at TIMESTAMPTZ;
