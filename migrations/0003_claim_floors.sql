-- harel-jobs migration 0003: claim floors, so that a claim's cost does not grow with the dead
-- rows an old snapshot keeps.
--
-- Every job leaves dead index entries behind it in transport_groups_claimable (where it
-- became claimable, and where its lease would have ended). Vacuum removes them, unless a
-- session holds an old snapshot (an idle transaction, a long report, a replication slot):
-- then they pile up exactly where every claim starts its scan. A claim of level p now scans
-- only from claim_floor_p: a position (microseconds since the epoch) below which no group
-- of that level is claimable. Claims raise their level's floor to just below the oldest
-- claimable group they find (a margin below it covers transactions still committing); a
-- group that commits below a floor later is brought back by the NOTIFY its publisher sends
-- (the worker passes it to its next claim) or by harel_maintain's sweep. Sequences, not a
-- table: they are read and set outside MVCC, so no old snapshot makes them slower.
CREATE SEQUENCE "harel".claim_floor_0 AS BIGINT MINVALUE 0 START WITH 0;
CREATE SEQUENCE "harel".claim_floor_1 AS BIGINT MINVALUE 0 START WITH 0;
CREATE SEQUENCE "harel".claim_floor_2 AS BIGINT MINVALUE 0 START WITH 0;
CREATE SEQUENCE "harel".claim_floor_3 AS BIGINT MINVALUE 0 START WITH 0;
CREATE SEQUENCE "harel".claim_floor_4 AS BIGINT MINVALUE 0 START WITH 0;

-- harel_claim takes a hint (p_hint), harel_maintain returns what it did: new signatures.
DROP FUNCTION IF EXISTS "harel".harel_claim(UUID, BIGINT, INT, INT);
DROP FUNCTION IF EXISTS "harel".harel_maintain();
