-- The statements that differ where the records table is a Citus
-- distributed table (idemmigrate's Distribute), each replacing the block of
-- the same name in sql/*.sql. The engine uses them once it finds the table
-- distributed (store.detect). docs/scaling.md, "Citus", says why each
-- differs; the protocol is the same.
--
-- Citus sends a statement on the records table to the worker holding its
-- shard, after evaluating on the coordinator every function in it that is
-- not IMMUTABLE, and it refuses a VOLATILE function in an UPDATE and any
-- function but an IMMUTABLE one in a RETURNING. So:
-- - lease and retention arithmetic reads statement_timestamp() (STABLE: the
--   time the statement arrived), where a single PostgreSQL reads
--   clock_timestamp(); both are a moment of the statement itself, not of
--   its transaction's start;
-- - the claim wait (lock_timeout) is set for the worker that waits, by a
--   SET LOCAL that Citus propagates (store.citusWait), not by set_config
--   in the statement, which would set it on the coordinator only;
-- - the timeline, the primary's, is not recorded: the coordinator's would
--   say nothing of the worker that holds the record (docs/scaling.md).

-- name: Claim :execrows
INSERT INTO {{schema}}.records (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation, derived_key_length)
VALUES (@id, @namespace, @scope, @key, @owner_token, @operation, @fingerprint,
    now() + @lease_us::bigint * interval '1 microsecond', @request, @background,
    now() + @retention_us::bigint * interval '1 microsecond', @key_derivation, @derived_key_length)
ON CONFLICT DO NOTHING;

-- name: ClaimAsync :execrows
-- Claim's: synchronous_commit is set with the claim wait (store.citusWait).
INSERT INTO {{schema}}.records (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation, derived_key_length)
VALUES (@id, @namespace, @scope, @key, @owner_token, @operation, @fingerprint,
    now() + @lease_us::bigint * interval '1 microsecond', @request, @background,
    now() + @retention_us::bigint * interval '1 microsecond', @key_derivation, @derived_key_length)
ON CONFLICT DO NOTHING;

-- name: Takeover :one
UPDATE {{schema}}.records
SET owner_token = @new_owner,
    lease_until = statement_timestamp() + @lease_us::bigint * interval '1 microsecond',
    expires_at = GREATEST(expires_at, statement_timestamp() + @retention_us::bigint * interval '1 microsecond'),
    attempts = attempts + 1
WHERE id = @id AND owner_token = @owner_token AND lease_until <= now()
RETURNING recovery_point, phase_state, key_derivation, derived_key_length, false;

-- name: Advance :one
WITH advanced AS (
    UPDATE {{schema}}.records
    SET recovery_point = @recovery_point, phase_state = @phase_state,
        lease_until = GREATEST(lease_until, statement_timestamp() + @lease_us::bigint * interval '1 microsecond'),
        expires_at = GREATEST(expires_at, statement_timestamp() + @retention_us::bigint * interval '1 microsecond')
    WHERE id = @id AND owner_token = @owner_token
    RETURNING 1)
SELECT 1 / count(*) FROM advanced;

-- name: Complete :one
WITH completed AS (
    UPDATE {{schema}}.records
    SET owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL, key_derivation = NULL, derived_key_length = NULL,
        operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
        request = NULL, background = NULL, timeline = NULL,
        fingerprint = @fingerprint, response_status = @status, response_headers = @headers,
        response_body = @body, body_omitted = @body_omitted,
        expires_at = statement_timestamp() + @retention_us::bigint * interval '1 microsecond'
    WHERE id = @id AND owner_token = @owner_token
    RETURNING 1)
SELECT 1 / count(*) FROM completed;

-- name: InsertCompleted :exec
-- The claim wait is set before it and restored after it (store.citusWait).
INSERT INTO {{schema}}.records (id, fingerprint, response_status, response_headers, response_body,
    body_omitted, expires_at, created_at, attempts, key_derivation, background, recovery_point)
VALUES (@id, @fingerprint, @status, @headers, @body, @body_omitted,
    statement_timestamp() + @retention_us::bigint * interval '1 microsecond', NULL, NULL, NULL, NULL, NULL);

-- name: Refresh :execrows
UPDATE {{schema}}.records
SET lease_until = GREATEST(lease_until, statement_timestamp() + @lease_us::bigint * interval '1 microsecond')
WHERE id = @id AND owner_token = @owner_token;

-- name: PruneSkipping :one
-- Citus runs no FOR UPDATE ... SKIP LOCKED across shards: the batch is
-- chosen without locking, then deleted by id where it is still freeable,
-- each held row waited on for at most the pruner's wait (store.citusWait):
-- past it the batch fails with lock_not_available, and the next prune
-- tries again.
WITH batch AS (
    SELECT id FROM {{schema}}.records
    WHERE expires_at >= @from
        AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''))
    ORDER BY expires_at LIMIT @batch),
gone AS (
    DELETE FROM {{schema}}.records AS d USING batch WHERE d.id = batch.id
        AND d.expires_at <= now() AND (d.owner_token IS NULL OR (d.lease_until <= now() AND d.recovery_point = ''))
    RETURNING d.expires_at)
SELECT count(*), max(expires_at) FROM gone;
