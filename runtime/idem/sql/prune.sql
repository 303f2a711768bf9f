-- The pruner's statements (prune.go). A batch is the records whose
-- expires_at lies in [@from, @to). PruneBounds finds the ends of the next
-- batches by one index-only walk; Prune deletes the freeable records of one
-- range by one scan of the index on expires_at, with no lookup by primary
-- key, no separate row lock (each would write its own WAL record) and no
-- ctid, so that it runs unchanged on the distributed engines of
-- docs/scaling.md. What a record must be to be deleted is DeleteExpired's
-- rule: past its retention, and completed or claimed by nobody live with no
-- committed phase. The retention is in both PruneBounds and Prune: the
-- walk's ends the batches, the delete's does not trust a bound from another
-- statement. docs/internals.md, "Pruning", gives the reasons for the shape.

-- name: PruneBounds :many
-- The ends of the next @batches batches of @batch records, from @from on:
-- the first record past its retention, and every @batch-th after it, each
-- marked (tied) when the record before it expires in the same instant (a
-- range starting there would also take those before it, more than a
-- batch). The bounds become Prune's parameters, not a subquery, so that the
-- planner knows the range is small; and the walk starts at a live record,
-- not where statistics gathered before the last prune still count deleted
-- ones, so a batch never walks the index entries of the rows deleted before
-- it, which stay until vacuum.
SELECT expires_at, coalesce(tied, false) FROM (
    SELECT expires_at, row_number() OVER w AS n, lag(expires_at) OVER w = expires_at AS tied FROM (
        SELECT expires_at FROM {{schema}}.records WHERE expires_at >= @from AND expires_at <= now()
        ORDER BY expires_at LIMIT @batch::bigint * @batches + 1) AS walk
    WINDOW w AS (ORDER BY expires_at)) AS numbered
WHERE (n - 1) % @batch::bigint = 0
ORDER BY expires_at;

-- name: Prune :one
-- Deletes the freeable records of the range [@from, @to) and counts them,
-- in a transaction of its own that commits without waiting for its WAL to
-- reach the disk: a batch lost in a crash leaves expired records that the
-- next prune deletes, and any later durable commit flushes the WAL that
-- holds it. A row another transaction holds (another pruner, a claim
-- deleting the expired record of its key, an operator) is waited on for at
-- most @lock_timeout; past it the statement fails with lock_not_available,
-- and the pruner runs PruneSkipping for the batch instead.
WITH settings AS (
    SELECT set_config('synchronous_commit', 'off', true) AS async, set_config('lock_timeout', @lock_timeout, true) AS wait),
gone AS (
    DELETE FROM {{schema}}.records
    WHERE expires_at >= @from AND expires_at < @to
        AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''))
        AND (SELECT wait FROM settings) IS NOT NULL
    RETURNING 1)
SELECT count(*) FROM gone;

-- name: PruneSkipping :one
-- The pruner's batch where Prune would wait or cannot bound its range (the
-- last batch, or one whose records all expire in one instant): the oldest
-- @batch freeable records from @from on, locked (skipping those another
-- transaction holds) and deleted by primary key. It returns how many it
-- deleted and the last expires_at it reached.
WITH batch AS (
    SELECT id FROM {{schema}}.records AS r, (SELECT set_config('synchronous_commit', 'off', true)) AS async
    WHERE expires_at >= @from
        AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''))
    ORDER BY expires_at LIMIT @batch FOR UPDATE OF r SKIP LOCKED),
gone AS (
    DELETE FROM {{schema}}.records AS d USING batch WHERE d.id = batch.id
    RETURNING d.expires_at)
SELECT count(*), max(expires_at) FROM gone;

-- name: PruneRest :one
-- A pause between two batches of one round trip, taken in the server, which
-- answers how long it slept.
SELECT extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 FROM pg_sleep(@seconds::float8);

-- name: CountStuck :one
-- The records Abandoned(ctx, true, ...) lists: claimed, no live owner, past
-- their retention (EventStuck).
SELECT count(*) FROM {{schema}}.records
WHERE expires_at <= now() AND owner_token IS NOT NULL AND lease_until <= now();
