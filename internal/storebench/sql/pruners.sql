-- Three ways to delete expired records in batches of 1,000, side by side:
-- time on the server and WAL written per record (docs/scaling.md, "What
-- changes so that it runs on all three"). Run it with psql on a scratch
-- database of a durable cluster, e.g.
--
--   psql -X -q -d scratch -f internal/storebench/sql/pruners.sql
--
-- Each run makes a table shaped like the records (a 36-character key,
-- scope, namespace, expires_at, a fingerprint and 200 bytes of payload;
-- the primary key and the index on expires_at of the migrations), 200,000
-- records expired a millisecond apart, vacuums, checkpoints, and deletes
-- them all with one statement, committing each batch as Prune does. The
-- three run twice, alternating (pruners_round.sql is one of each).
\set ON_ERROR_STOP 1
SET synchronous_commit = off;

-- pruners_run deletes in batches by stmt ($1: where the previous batch
-- ended; it returns how many it deleted and where the next starts, NULL
-- when done). With bound (the range pruner), each batch first finds its
-- upper end, and stmt gets it as $2, as the engine sends them.
CREATE OR REPLACE PROCEDURE pruners_run(label text, stmt text, bound text DEFAULT NULL) LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    upto timestamptz := '-infinity';
    next timestamptz;
    t0 timestamptz := clock_timestamp();
    lsn0 pg_lsn := pg_current_wal_lsn();
BEGIN
    LOOP
        IF bound IS NULL THEN
            EXECUTE stmt INTO n, upto USING upto;
        ELSE
            EXECUTE bound INTO next USING upto;
            EXECUTE stmt INTO n USING upto, coalesce(next, 'infinity');
            upto := next;
        END IF;
        COMMIT;
        EXIT WHEN upto IS NULL;
    END LOOP;
    RAISE NOTICE '%: % s, % bytes of WAL a record, % left', rpad(label, 24),
        round(extract(epoch FROM clock_timestamp() - t0)::numeric, 3),
        round(pg_wal_lsn_diff(pg_current_wal_lsn(), lsn0) / 200000),
        (SELECT count(*) FROM pruners_r);
END $$;

\set setup 'DROP TABLE IF EXISTS pruners_r; CREATE TABLE pruners_r (key text, scope text, namespace text, expires_at timestamptz NOT NULL, fp text, pad text, PRIMARY KEY (key, scope, namespace)) WITH (fillfactor = 90); CREATE INDEX pruners_r_exp ON pruners_r (expires_at); INSERT INTO pruners_r SELECT lpad(g::text, 36, \'0\'), \'scope\' || (g % 5000), \'\', now() - interval \'1 hour\' + g * interval \'1 ms\', md5(g::text), repeat(\'x\', 200) FROM generate_series(1, 200000) g;'

-- Today's batch: its bound by an index-only walk, then a range of
-- expires_at deleted by one index scan, no row lock.
\set bound 'SELECT expires_at FROM pruners_r WHERE expires_at >= $1 AND expires_at <= now() ORDER BY expires_at OFFSET 1000 LIMIT 1'
\set range 'WITH gone AS (DELETE FROM pruners_r WHERE expires_at >= $1 AND expires_at < $2 AND expires_at <= now() RETURNING 1) SELECT count(*) FROM gone'
-- The skipping batch (and the batch before issue 12): locked, deleted by primary key.
\set bykey 'WITH b AS (SELECT key, scope, namespace FROM pruners_r WHERE expires_at >= $1 AND expires_at <= now() ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED), g AS (DELETE FROM pruners_r d USING b WHERE (d.key, d.scope, d.namespace) = (b.key, b.scope, b.namespace) RETURNING d.expires_at) SELECT count(*), max(expires_at) FROM g'
-- Locked, deleted by ctid (PostgreSQL only).
\set byctid 'WITH b AS (SELECT ctid FROM pruners_r WHERE expires_at >= $1 AND expires_at <= now() ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED), g AS (DELETE FROM pruners_r d WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM b)) RETURNING d.expires_at) SELECT count(*), max(expires_at) FROM g'

\ir pruners_round.sql
\ir pruners_round.sql
DROP TABLE pruners_r;
DROP PROCEDURE pruners_run;
