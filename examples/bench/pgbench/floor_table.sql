-- The floor scenario's table: the least an at-least-once queue with leases needs. One row
-- per job, the time it may next be leased, the lease's token, a payload; one index to find
-- due jobs in order (and the primary key to delete them). No groups, no attempts, no
-- priorities, no dead letters, no NOTIFY.
CREATE TABLE IF NOT EXISTS public.floor_jobs (
    id           BIGSERIAL   PRIMARY KEY,
    available_at TIMESTAMPTZ NOT NULL,
    lease        UUID,
    payload      JSON        NOT NULL
);
CREATE INDEX IF NOT EXISTS floor_jobs_available_at ON public.floor_jobs (available_at);
