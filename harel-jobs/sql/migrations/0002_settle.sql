-- harel-jobs migration 0002: one settle operation, answerable after a lost reply.
--
-- 0001's harel_ack and harel_nack become one function, harel_settle
-- (../functions/harel_settle.sql): a worker writes all of a batch's outcomes in one round
-- trip. Every function now runs as its owner with a pinned search_path, so roles need
-- EXECUTE on the functions they call and nothing on the tables (see README.md).
DROP FUNCTION IF EXISTS @schema@.harel_ack(TEXT[], BIGINT[], UUID[], TEXT[], INT[]);
DROP FUNCTION IF EXISTS @schema@.harel_nack(TEXT[], BIGINT[], UUID[], BIGINT[], TEXT[], BOOLEAN[]);
-- now takes a duration, like every function: the database's clock decides
DROP FUNCTION IF EXISTS @schema@.harel_drop_empty_groups(TEXT[], TIMESTAMPTZ);

-- What a settle batch applied, kept so that the same batch sent again (its reply was lost,
-- the worker cannot know whether it committed) is answered from here instead of applied
-- twice. A worker keeps one receipt at a time: each batch names the previous receipt, which
-- is deleted then. harel_maintain prunes the last receipts of workers that stopped.
CREATE TABLE @schema@.settle_receipts (
    receipt    UUID        PRIMARY KEY,
    applied    BOOLEAN[]   NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
