-- harel_jobs_gone: which of these jobs are gone from everywhere a job can be. Internal:
-- called by harel_maintain's sweeps of the tables kept per job (job_steps, job_attempts).
--
-- Takes:
--   p_ids  job ids (duplicates allowed)
-- Returns the ids found nowhere: not queued (transport_messages, a group of its own, a
--   named group's inline message), not in job_history, not in dead_letters. A job's id is
--   never used again and a job that is gone never comes back (a retried dead letter is a
--   new job), so the answer is final.
-- Fence: none: it reads.
-- Locks: none.
-- Indexes: per job, as harel_job reads: transport_messages_by_id, transport_groups' key
--   ('own:' and the id), transport_groups_by_inline_id (its predicate repeated word for
--   word), the keys of job_history and dead_letters.
-- Errors: none of its own.
CREATE OR REPLACE FUNCTION "harel".harel_jobs_gone(p_ids BIGINT[])
RETURNS BIGINT[]
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_gone BIGINT[];
BEGIN
    -- correlated subqueries in a select list, never turned into a walk of an index or a
    -- table joined to the array (COALESCE stops at the first place that has it)
    SELECT array_agg(j.id) INTO v_gone
      FROM (SELECT x.id,
                   COALESCE(
                       (SELECT true FROM "harel".transport_messages m
                         WHERE m.seq = x.id LIMIT 1),
                       (SELECT true FROM "harel".transport_groups g
                         WHERE g.group_id = 'own:' || lpad(x.id::text, 19, '0')
                           AND g.inline_seq = x.id),
                       (SELECT true FROM "harel".transport_groups g
                         WHERE g.inline_seq = x.id
                           AND g.group_id <> 'own:' || lpad(g.inline_seq::text, 19, '0')
                         LIMIT 1),
                       (SELECT true FROM "harel".job_history h WHERE h.id = x.id),
                       (SELECT true FROM "harel".dead_letters d WHERE d.id = x.id),
                       false) AS found
              FROM (SELECT DISTINCT u.id FROM unnest(p_ids) AS u(id)) AS x
            OFFSET 0) AS j
     WHERE NOT j.found;
    RETURN v_gone;
END
$$;

REVOKE ALL ON FUNCTION "harel".harel_jobs_gone(BIGINT[]) FROM PUBLIC;
