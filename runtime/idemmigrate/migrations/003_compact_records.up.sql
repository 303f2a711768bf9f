-- A smaller record, and lease refreshes that touch no index (issue 12).
--
-- One ALTER TABLE, so the table and its indexes are rewritten once, under
-- an ACCESS EXCLUSIVE lock: claims wait for it (about 10 s per million
-- records on a 2-core machine; see docs/operations.md). The table keeps its
-- OID, grants and any index or view of the user's own.
ALTER TABLE {{schema}}.records
    -- Never read: created_at gives the age, expires_at the end of retention.
    DROP COLUMN completed_at,
    -- The engine writes these as JSON text and reads them back whole; jsonb's
    -- binary form is a fifth to a third larger for small documents and is
    -- never queried into.
    ALTER COLUMN phase_state TYPE json,
    ALTER COLUMN response_headers TYPE json,
    ALTER COLUMN response_status TYPE smallint,
    -- The key first: keys generated from the clock (UUIDv7, as
    -- runtime/idemclient sends them) then arrive in index order and fill the
    -- index's pages, where (namespace, scope, key) splits a page in every
    -- scope and leaves them half empty. Every statement names all three
    -- columns, so any order serves them.
    DROP CONSTRAINT records_pkey,
    ADD CONSTRAINT records_pkey PRIMARY KEY (key, scope, namespace),
    -- Room on each page for new versions of its rows, so that a lease
    -- refresh, which changes no indexed column, stays on the page as a
    -- heap-only tuple (see docs/internals.md, "The record").
    SET (fillfactor = 90);

-- The completer's index no longer names lease_until: a column that every
-- refresh changes must not be indexed, or no refresh is a heap-only update.
-- The completer reads the few claimed background records and sorts them.
DROP INDEX {{schema}}.records_abandoned;
CREATE INDEX records_abandoned ON {{schema}}.records (operation) WHERE state = 'claimed' AND background;
