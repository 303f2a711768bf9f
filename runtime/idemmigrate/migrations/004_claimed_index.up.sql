-- The claimed records, found without reading the completed ones (issue 12).
--
-- The stuck count that ends every prune and an operator's Abandoned look
-- for claimed records whose lease ran out. Without an index of their own
-- they read every record past its retention (through records_expires_at,
-- whose entries for the records a prune has just deleted stay until
-- vacuum) or the whole table. This index holds only claimed records: its
-- live entries are a table's few in-flight executions, and a completed
-- record's version has none (its claimed version's stays until vacuum).
-- It names expires_at, which a lease refresh does not change, so refreshes
-- stay heap-only updates; and a claimed record's state changes on
-- completion anyway, which an index whose predicate names state already
-- made a non-HOT update (records_abandoned).
--
-- Building it locks out writes to the table for one scan of it. On a large
-- table, build it first without that lock, and this migration keeps it:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS records_claimed
--       ON {{schema}}.records (expires_at) WHERE state = 'claimed';
-- A concurrent build that failed, was cancelled or still runs leaves the
-- index invalid: never used by the planner, yet kept up by every write.
-- This migration does not drop it (it may be a build still at work): it
-- stops, and says so. The statement is plain SQL, with no DO block, so
-- that tools which split a file on semicolons apply it too; it fails by
-- casting its message to an integer for each such index (the message
-- names the index from the row, so the planner cannot fold the cast into
-- a constant and fail where there is none).
SELECT (indexrelid::regclass::text || ' exists but is not valid: a CREATE INDEX CONCURRENTLY failed, was cancelled or still runs; '
    || 'wait for it, or DROP INDEX CONCURRENTLY ' || indexrelid::regclass::text || ', and migrate again')::integer
FROM pg_index WHERE indexrelid = to_regclass('{{schema}}.records_claimed') AND NOT indisvalid;
CREATE INDEX IF NOT EXISTS records_claimed ON {{schema}}.records (expires_at) WHERE state = 'claimed';
