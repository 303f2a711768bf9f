-- Which primary last wrote a claimed record: the key store divergence
-- signal (docs/operations.md, "Alerts").
--
-- A standby promoted by a failover writes on a new timeline. A claim, and
-- every recovery point after it, records the timeline of the primary that
-- wrote it; a takeover of a record last written on another timeline than
-- the primary's now is an execution that crossed a failover, where an
-- asynchronous standby may have lost what the old primary acknowledged.
-- The engine reports it (EventPrimaryChanged, idemgen_events_total
-- {event="primary_changed"}).
--
-- Completion clears it, as it clears the claim's other columns: a receipt
-- keeps only what a replay needs, in 152 bytes that 4 more would make 160
-- (migration 005). The cluster's system identifier is not kept: a failover
-- keeps it, and reading it (pg_control_system() reads the control file)
-- costs 8 µs a call where the timeline costs 0.2.
--
-- Adding a column with no default rewrites nothing: the migration is
-- immediate on a table of any size, and existing records hold NULL, which
-- is never taken for another timeline.
ALTER TABLE {{schema}}.records ADD COLUMN timeline integer;

-- The timeline of the WAL being written now: the first eight hex digits
-- of the current WAL file's name. VOLATILE as pg_current_wal_lsn is, and a
-- single expression, so that the planner inlines it into the statements
-- that call it (a call through the SQL function executor would cost tens
-- of microseconds). On a standby it fails, as every write there does.
CREATE FUNCTION {{schema}}.timeline() RETURNS integer
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
