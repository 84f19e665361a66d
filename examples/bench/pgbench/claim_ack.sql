-- pgbench script: one transaction = one claim (limit 1) and one ack of that message: two
-- round trips, as Transport::claim + Transport::settle_many. Run with -M prepared (variables are
-- bound as parameters). \gset fails the client if the claim finds nothing, and the ack
-- divides by zero unless the message was really acked, so every counted transaction
-- completed one real message.
SELECT t.token AS token, c.group_id AS grp, c.seq AS seq
  FROM (SELECT gen_random_uuid() AS token) AS t,
       harel.harel_claim(t.token, 30000, 1, 0) AS c \gset
-- The ack carries a receipt and forgets a previous one, as the pool's completer's do.
SELECT 1 / count(*) FILTER (WHERE a.outcome = 'applied') AS ok
  FROM harel.harel_settle(ARRAY[:grp::text], ARRAY[:seq::bigint], ARRAY[:token::uuid],
                          ARRAY['ack'], ARRAY[NULL::bigint], ARRAY[NULL::text],
                          ARRAY[NULL::boolean], ARRAY[NULL::int],
                          gen_random_uuid(), gen_random_uuid()) AS a \gset
