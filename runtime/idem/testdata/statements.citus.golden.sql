-- Every statement as the engine sends it to a Citus distributed records table
-- (sql/*.sql, with sql/citus/*.sql in place of the blocks it names), for schema idemgen.
-- Written by TestStatementsGolden -update; do not edit.

-- name: Claim :execrows
-- $1: @id
-- $2: @namespace
-- $3: @scope
-- $4: @key
-- $5: @owner_token
-- $6: @operation
-- $7: @fingerprint
-- $8: @lease_us
-- $9: @request
-- $10: @background
-- $11: @retention_us
-- $12: @key_derivation
-- $13: @derived_key_length
INSERT INTO idemgen.records (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation, derived_key_length)
VALUES ($1, $2, $3, $4, $5, $6, $7,
    now() + $8::bigint * interval '1 microsecond', $9, $10,
    now() + $11::bigint * interval '1 microsecond', $12, $13)
ON CONFLICT DO NOTHING;

-- name: ClaimAsync :execrows
-- $1: @id
-- $2: @namespace
-- $3: @scope
-- $4: @key
-- $5: @owner_token
-- $6: @operation
-- $7: @fingerprint
-- $8: @lease_us
-- $9: @request
-- $10: @background
-- $11: @retention_us
-- $12: @key_derivation
-- $13: @derived_key_length
INSERT INTO idemgen.records (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation, derived_key_length)
VALUES ($1, $2, $3, $4, $5, $6, $7,
    now() + $8::bigint * interval '1 microsecond', $9, $10,
    now() + $11::bigint * interval '1 microsecond', $12, $13)
ON CONFLICT DO NOTHING;

-- name: Read :one
-- $1: @id
SELECT coalesce(r.operation, ''), r.fingerprint,
    CASE WHEN r.owner_token IS NOT NULL THEN 'claimed' WHEN r.id IS NOT NULL THEN 'completed' ELSE '' END,
    r.owner_token, coalesce(r.lease_until > now(), false),
    coalesce(extract(epoch FROM r.lease_until - now()), 0)::float8, coalesce(r.expires_at <= now(), false),
    coalesce(extract(epoch FROM r.expires_at - now()), 0)::float8, coalesce(r.recovery_point, ''), r.phase_state,
    r.response_status, r.response_headers, r.response_body, coalesce(r.body_omitted, false)
FROM idemgen.records AS r
WHERE r.id = $1;

-- name: ClaimRead :one
-- $1: @statement_timeout
-- $2: @id
SELECT coalesce(r.operation, ''), r.fingerprint,
    CASE WHEN r.owner_token IS NOT NULL THEN 'claimed' WHEN r.id IS NOT NULL THEN 'completed' ELSE '' END,
    r.owner_token, coalesce(r.lease_until > now(), false),
    coalesce(extract(epoch FROM r.lease_until - now()), 0)::float8, coalesce(r.expires_at <= now(), false),
    coalesce(extract(epoch FROM r.expires_at - now()), 0)::float8, coalesce(r.recovery_point, ''), r.phase_state,
    r.response_status, r.response_headers, r.response_body, coalesce(r.body_omitted, false)
FROM (SELECT set_config('statement_timeout', $1, true) AS statement_timeout,
        set_config('idle_in_transaction_session_timeout', $1, true) AS idle_timeout) AS settings
    LEFT JOIN idemgen.records AS r ON r.id = $2;

-- name: Takeover :one
-- $1: @new_owner
-- $2: @lease_us
-- $3: @retention_us
-- $4: @id
-- $5: @owner_token
UPDATE idemgen.records
SET owner_token = $1,
    lease_until = statement_timestamp() + $2::bigint * interval '1 microsecond',
    expires_at = GREATEST(expires_at, statement_timestamp() + $3::bigint * interval '1 microsecond'),
    attempts = attempts + 1
WHERE id = $4 AND owner_token = $5 AND lease_until <= now()
RETURNING recovery_point, phase_state, key_derivation, derived_key_length, false;

-- name: DeleteExpired :execrows
-- $1: @id
DELETE FROM idemgen.records
WHERE id = $1
    AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''));

-- name: Watch :many
-- $1: @ids
SELECT id, CASE WHEN owner_token IS NULL THEN 2 WHEN lease_until > now() THEN 1 ELSE 3 END
FROM idemgen.records
WHERE id = ANY($1);

-- name: Advance :one
-- $1: @recovery_point
-- $2: @phase_state
-- $3: @lease_us
-- $4: @retention_us
-- $5: @id
-- $6: @owner_token
WITH advanced AS (
    UPDATE idemgen.records
    SET recovery_point = $1, phase_state = $2,
        lease_until = GREATEST(lease_until, statement_timestamp() + $3::bigint * interval '1 microsecond'),
        expires_at = GREATEST(expires_at, statement_timestamp() + $4::bigint * interval '1 microsecond')
    WHERE id = $5 AND owner_token = $6
    RETURNING 1)
SELECT 1 / count(*) FROM advanced;

-- name: Complete :one
-- $1: @fingerprint
-- $2: @status
-- $3: @headers
-- $4: @body
-- $5: @body_omitted
-- $6: @retention_us
-- $7: @id
-- $8: @owner_token
WITH completed AS (
    UPDATE idemgen.records
    SET owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL, key_derivation = NULL, derived_key_length = NULL,
        operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
        request = NULL, background = NULL, timeline = NULL,
        fingerprint = $1, response_status = $2, response_headers = $3,
        response_body = $4, body_omitted = $5,
        expires_at = statement_timestamp() + $6::bigint * interval '1 microsecond'
    WHERE id = $7 AND owner_token = $8
    RETURNING 1)
SELECT 1 / count(*) FROM completed;

-- name: InsertCompleted :exec
-- $1: @id
-- $2: @fingerprint
-- $3: @status
-- $4: @headers
-- $5: @body
-- $6: @body_omitted
-- $7: @retention_us
INSERT INTO idemgen.records (id, fingerprint, response_status, response_headers, response_body,
    body_omitted, expires_at, created_at, attempts, key_derivation, background, recovery_point)
VALUES ($1, $2, $3, $4, $5, $6,
    statement_timestamp() + $7::bigint * interval '1 microsecond', NULL, NULL, NULL, NULL, NULL);

-- name: CompleteNatural :one
-- $1: @natural_key
-- $2: @fingerprint
-- $3: @status
-- $4: @headers
-- $5: @body
-- $6: @body_omitted
-- $7: @retention_us
-- $8: @id
-- $9: @owner_token
WITH completed AS (
    UPDATE idemgen.records
    SET owner_token = NULL, lease_until = NULL, created_at = statement_timestamp(), natural_key = $1, attempts = NULL, key_derivation = NULL, derived_key_length = NULL,
        operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
        request = NULL, background = NULL, timeline = NULL,
        fingerprint = $2, response_status = $3, response_headers = $4,
        response_body = $5, body_omitted = $6,
        expires_at = statement_timestamp() + $7::bigint * interval '1 microsecond'
    WHERE id = $8 AND owner_token = $9
    RETURNING 1)
SELECT 1 / count(*) FROM completed;

-- name: InsertCompletedNatural :exec
-- $1: @id
-- $2: @fingerprint
-- $3: @status
-- $4: @headers
-- $5: @body
-- $6: @body_omitted
-- $7: @retention_us
-- $8: @natural_key
INSERT INTO idemgen.records (id, fingerprint, response_status, response_headers, response_body,
    body_omitted, expires_at, created_at, attempts, key_derivation, background, recovery_point, natural_key)
VALUES ($1, $2, $3, $4, $5, $6,
    statement_timestamp() + $7::bigint * interval '1 microsecond', statement_timestamp(), NULL, NULL, NULL, NULL, $8);

-- name: CommitAsync :exec
SET LOCAL synchronous_commit = off; COMMIT;

-- name: Release :execrows
-- $1: @id
-- $2: @owner_token
-- $3: @recovery_point
DELETE FROM idemgen.records
WHERE id = $1 AND owner_token = $2 AND recovery_point = $3;

-- name: Yield :exec
-- $1: @id
-- $2: @owner_token
UPDATE idemgen.records
SET lease_until = now()
WHERE id = $1 AND owner_token = $2;

-- name: Refresh :execrows
-- $1: @lease_us
-- $2: @id
-- $3: @owner_token
UPDATE idemgen.records
SET lease_until = GREATEST(lease_until, statement_timestamp() + $1::bigint * interval '1 microsecond')
WHERE id = $2 AND owner_token = $3;

-- name: PruneBounds :many
-- $1: @from
-- $2: @batch
-- $3: @batches
SELECT expires_at, coalesce(tied, false) FROM (
    SELECT expires_at, row_number() OVER w AS n, lag(expires_at) OVER w = expires_at AS tied FROM (
        SELECT expires_at FROM idemgen.records WHERE expires_at >= $1 AND expires_at <= now()
        ORDER BY expires_at LIMIT $2::bigint * $3 + 1) AS walk
    WINDOW w AS (ORDER BY expires_at)) AS numbered
WHERE (n - 1) % $2::bigint = 0
ORDER BY expires_at;

-- name: Prune :one
-- $1: @lock_timeout
-- $2: @from
-- $3: @to
WITH settings AS (
    SELECT set_config('synchronous_commit', 'off', true) AS async, set_config('lock_timeout', $1, true) AS wait),
gone AS (
    DELETE FROM idemgen.records
    WHERE expires_at >= $2 AND expires_at < $3
        AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''))
        AND (SELECT wait FROM settings) IS NOT NULL
    RETURNING 1)
SELECT count(*) FROM gone;

-- name: PruneSkipping :one
-- $1: @from
-- $2: @batch
WITH batch AS (
    SELECT id FROM idemgen.records
    WHERE expires_at >= $1
        AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''))
    ORDER BY expires_at LIMIT $2),
gone AS (
    DELETE FROM idemgen.records AS d USING batch WHERE d.id = batch.id
        AND d.expires_at <= now() AND (d.owner_token IS NULL OR (d.lease_until <= now() AND d.recovery_point = ''))
    RETURNING d.expires_at)
SELECT count(*), max(expires_at) FROM gone;

-- name: PruneRest :one
-- $1: @seconds
SELECT extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 FROM pg_sleep($1::float8);

-- name: CountStuck :one
SELECT count(*) FROM idemgen.records
WHERE expires_at <= now() AND owner_token IS NOT NULL AND lease_until <= now();

-- name: Inspect :one
-- $1: @id
SELECT id::text, coalesce(namespace, ''), coalesce(scope, ''), coalesce(key, ''), coalesce(operation, ''),
    CASE WHEN owner_token IS NOT NULL THEN 'claimed' WHEN id IS NOT NULL THEN 'completed' END,
    coalesce(recovery_point, ''), phase_state, owner_token::text, extract(epoch FROM lease_until - now())::float8,
    coalesce(attempts, 0), extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8,
    response_status, (owner_token IS NOT NULL AND lease_until <= now() AND expires_at <= now())
FROM idemgen.records
WHERE id = $1;

-- name: Abandoned :many
-- $1: @stuck_only
-- $2: @namespace
-- $3: @operation
-- $4: @limit
SELECT id::text, coalesce(namespace, ''), coalesce(scope, ''), coalesce(key, ''), coalesce(operation, ''),
    CASE WHEN owner_token IS NOT NULL THEN 'claimed' WHEN id IS NOT NULL THEN 'completed' END,
    coalesce(recovery_point, ''), phase_state, owner_token::text, extract(epoch FROM lease_until - now())::float8,
    coalesce(attempts, 0), extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8,
    response_status, (owner_token IS NOT NULL AND lease_until <= now() AND expires_at <= now())
FROM idemgen.records
WHERE owner_token IS NOT NULL AND lease_until <= now() AND (NOT $1 OR expires_at <= now())
    AND ($2::text = '' OR namespace = $2 OR operation = $3)
ORDER BY lease_until LIMIT $4;

-- name: NamespacesOf :many
-- $1: @operation
SELECT DISTINCT namespace FROM idemgen.records
WHERE operation = $1 AND namespace IS NOT NULL
ORDER BY namespace LIMIT 3;

-- name: AbandonedBackground :many
-- $1: @operations
-- $2: @max_attempts
-- $3: @limit
SELECT id, namespace, scope, key, operation, owner_token, request, fingerprint
FROM idemgen.records
WHERE owner_token IS NOT NULL AND background AND lease_until <= now()
    AND operation = ANY($1) AND attempts < $2
ORDER BY lease_until LIMIT $3;

-- name: ResolveDelete :execrows
-- $1: @id
DELETE FROM idemgen.records
WHERE id = $1 AND owner_token IS NOT NULL AND lease_until <= now();

-- name: ResolveRead :one
-- $1: @id
SELECT operation, fingerprint, owner_token
FROM idemgen.records
WHERE id = $1 AND owner_token IS NOT NULL AND lease_until <= now();

-- name: ResolveComplete :execrows
-- $1: @fingerprint
-- $2: @status
-- $3: @headers
-- $4: @body
-- $5: @retention_us
-- $6: @default_retention_us
-- $7: @id
-- $8: @owner_token
UPDATE idemgen.records
SET owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL, key_derivation = NULL, derived_key_length = NULL,
    operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
    request = NULL, background = NULL, timeline = NULL,
    fingerprint = $1,
    response_status = $2, response_headers = $3, response_body = $4, body_omitted = false,
    expires_at = now() + CASE WHEN $5::bigint > 0 THEN $5::bigint * interval '1 microsecond'
        ELSE GREATEST(expires_at - created_at, $6::bigint * interval '1 microsecond') END
WHERE id = $7 AND owner_token = $8 AND lease_until <= now();

-- name: Reconcile :many
-- $1: @since
-- $2: @limit
SELECT natural_key, count(*), min(created_at), max(created_at)
FROM idemgen.records
WHERE natural_key IS NOT NULL AND created_at >= $1
GROUP BY natural_key
HAVING count(*) > 1
ORDER BY max(created_at) DESC
LIMIT $2;
