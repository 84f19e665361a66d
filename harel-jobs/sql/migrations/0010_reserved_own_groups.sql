-- harel-jobs migration 0010: the names of groups of their own are reserved.
--
-- A job enqueued without a group is the only one in a group named 'own:' and its seq in 19
-- digits (migration 0005). The Rust side now refuses every such name as a caller's group id
-- (`InvalidMessage::ReservedGroup`); harel_publish refuses the names of seqs not given out
-- yet (the previous release's `DeadLetters::retry` names a group after a letter's old id)
-- and inserts the group rows of a batch of jobs without a group by a plain INSERT, without
-- ON CONFLICT: no row can hold a name made of a seq it has just drawn. Before this release
-- a caller could name a group after a seq not drawn yet, which would collide with the job
-- that draws it. So the sequence moves past the highest of those (nothing to do in the
-- common case: none).
--
-- SHARE mode: the transactions that have written to the table finish first, and the
-- publishes that call the old harel_publish meanwhile wait until this transaction has
-- replaced it (one that was already running goes on with the old body: a caller naming a
-- group so at that very moment is the one case this does not cover).
LOCK TABLE @schema@.transport_groups IN SHARE MODE;

SELECT setval('@schema@.transport_messages_seq_seq', named.top)
  FROM (SELECT max(n.seq)::bigint AS top
          FROM @schema@.transport_groups g
               -- (CASE: a cast is only safe on a name of that form, and the planner may
               -- evaluate a WHERE's conditions in any order)
               CROSS JOIN LATERAL (SELECT CASE WHEN g.group_id ~ '^own:[0-9]{19}$'
                                               THEN substr(g.group_id, 5)::numeric
                                          END AS seq) AS n
         WHERE g.group_id IS DISTINCT FROM 'own:' || lpad(g.inline_seq::text, 19, '0')
           -- (a name above the largest bigint is no seq)
           AND n.seq <= 9223372036854775807) AS named,
       @schema@.transport_messages_seq_seq AS s
 WHERE named.top > s.last_value;
