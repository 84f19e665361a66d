-- pgbench script: the physical floor of an at-least-once queue with leases, the same work
-- per job as claim_ack_batch.sql minus everything harel adds (groups, FIFO, priorities,
-- attempts, receipts, dead letters): one transaction = one lease of :k jobs (-D k=64) and
-- one delete of those :k jobs, two round trips. Run with -M prepared on a filled
-- public.floor_jobs (floor_table.sql).
-- The lease commits durably, as harel_claim does; the delete does not wait for the WAL
-- flush (set_config(…, true) in the same statement, as claim_ack_batch.sql's ack). Both
-- statements divide by zero unless exactly :k jobs were leased and deleted, so every
-- counted transaction completed :k real jobs.
WITH leased AS (
    UPDATE public.floor_jobs
       SET lease = t.token, available_at = now() + interval '30 s'
      FROM (SELECT gen_random_uuid() AS token) AS t
     WHERE id IN (SELECT id FROM public.floor_jobs
                   WHERE available_at <= now()
                   ORDER BY available_at
                   LIMIT :k
                     FOR UPDATE SKIP LOCKED)
    RETURNING id, lease)
SELECT min(lease::text) AS token, array_agg(id) AS ids, 1 / (count(*) / :k::int) AS ok
  FROM leased \gset
-- The delete is fenced on the lease, as harel's ack is.
WITH done AS (
    DELETE FROM public.floor_jobs
     WHERE id = ANY (:ids::bigint[]) AND lease = :token::uuid
    RETURNING id)
SELECT 1 / (count(*) / :k::int) AS ok
  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit, done \gset
