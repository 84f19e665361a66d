-- pgbench script: one transaction = one claim of :k groups (-D k=16 or 64) and one ack of
-- all :k messages: two round trips, as the worker pool's batched claim and batched ack.
-- Run with -M prepared. \gset fails the client if the claim finds nothing, and the ack
-- divides by zero unless exactly :k messages were acked, so every counted transaction
-- completed :k real messages. The ack carries a receipt and forgets a previous one, as the
-- pool's completer's do.
-- Commits as the worker pool's do: the claim waits for the WAL flush, the ack does not
-- (the pool's completer runs with synchronous_commit = off; here set_config(…, true) sets
-- it for the ack's own one-statement transaction, without another round trip).
SELECT t.token AS token, array_agg(c.group_id) AS grps, array_agg(c.seq) AS seqs
  FROM (SELECT gen_random_uuid() AS token) AS t,
       harel.harel_claim(t.token, 30000, :k, 0) AS c
 GROUP BY t.token \gset
SELECT 1 / (count(*) FILTER (WHERE a.outcome = 'applied') / :k::int) AS ok
  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit,
       harel.harel_settle(:grps::text[], :seqs::bigint[],
                          array_fill(:token::uuid, ARRAY[:k::int]),
                          array_fill('ack'::text, ARRAY[:k::int]),
                          array_fill(NULL::bigint, ARRAY[:k::int]),
                          array_fill(NULL::text, ARRAY[:k::int]),
                          array_fill(NULL::boolean, ARRAY[:k::int]),
                          array_fill(NULL::int, ARRAY[:k::int]),
                          gen_random_uuid(), gen_random_uuid()) AS a \gset
