-- An operator's and the background completer's reads and decisions
-- (operator.go, completer.go). Inspect and Abandoned share one row shape,
-- decoded by scanRecordInfo; a completed record's key, operation, attempts
-- and age are gone (migration 005).

-- name: Inspect :one
SELECT id::text, coalesce(namespace, ''), coalesce(scope, ''), coalesce(key, ''), coalesce(operation, ''),
    CASE WHEN owner_token IS NOT NULL THEN 'claimed' WHEN id IS NOT NULL THEN 'completed' END,
    coalesce(recovery_point, ''), phase_state, owner_token::text, extract(epoch FROM lease_until - now())::float8,
    coalesce(attempts, 0), extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8,
    response_status, (owner_token IS NOT NULL AND lease_until <= now() AND expires_at <= now())
FROM {{schema}}.records
WHERE id = @id;

-- name: Abandoned :many
-- Claimed records whose owner's lease expired, oldest lease first; with
-- @stuck_only, only those past their retention; with a @namespace, only
-- that namespace's or @operation's (the filter is the query's, before its
-- limit).
SELECT id::text, coalesce(namespace, ''), coalesce(scope, ''), coalesce(key, ''), coalesce(operation, ''),
    CASE WHEN owner_token IS NOT NULL THEN 'claimed' WHEN id IS NOT NULL THEN 'completed' END,
    coalesce(recovery_point, ''), phase_state, owner_token::text, extract(epoch FROM lease_until - now())::float8,
    coalesce(attempts, 0), extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8,
    response_status, (owner_token IS NOT NULL AND lease_until <= now() AND expires_at <= now())
FROM {{schema}}.records
WHERE owner_token IS NOT NULL AND lease_until <= now() AND (NOT @stuck_only OR expires_at <= now())
    AND (@namespace::text = '' OR namespace = @namespace OR operation = @operation)
ORDER BY lease_until LIMIT @limit;

-- name: NamespacesOf :many
-- The namespaces (groups) holding claimed records of @operation: how an
-- operator who names an operationId learns its group. A completed record
-- keeps no operation, so only claims tell.
SELECT DISTINCT namespace FROM {{schema}}.records
WHERE operation = @operation AND namespace IS NOT NULL
ORDER BY namespace LIMIT 3;

-- name: AbandonedBackground :many
-- The completer's work: abandoned records of background operations
-- (@operations) it has not given up on. attempts counts the claim and every
-- takeover: a record that keeps failing (a poisoned request, a phase that
-- panics) is left to an operator instead of being tried forever. The id
-- is read, not made again from the rest: a record claimed with key
-- derivation 3 keeps its scope's digest, not the scope.
SELECT id, namespace, scope, key, operation, owner_token, request, fingerprint
FROM {{schema}}.records
WHERE owner_token IS NOT NULL AND background AND lease_until <= now()
    AND operation = ANY(@operations) AND attempts < @max_attempts
ORDER BY lease_until LIMIT @limit;

-- name: ResolveDelete :execrows
-- An operator frees the key of an abandoned record (Resolution.Delete).
DELETE FROM {{schema}}.records
WHERE id = @id AND owner_token IS NOT NULL AND lease_until <= now();

-- name: ResolveRead :one
-- What ResolveComplete needs of an abandoned record: its operation and
-- fingerprint, of which the receipt's fingerprint is made
-- (receiptFingerprint), and its owner, which fences the completion.
SELECT operation, fingerprint, owner_token
FROM {{schema}}.records
WHERE id = @id AND owner_token IS NOT NULL AND lease_until <= now();

-- name: ResolveComplete :execrows
-- An operator completes an abandoned record with a problem response, if
-- its owner is still the one ResolveRead saw (@owner_token) and its lease
-- still expired; @fingerprint is the receipt's, made from what
-- ResolveRead read. Without a retention of the operator's (@retention_us =
-- 0) the answer is kept for the operation's own, from now: the window the
-- record was claimed with (expires_at - created_at, which takeovers only
-- lengthen), so that the answer lasts as long as any execution of the key
-- would have; at least the default retention, should the window have been
-- cut short by hand.
UPDATE {{schema}}.records
SET owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL, key_derivation = NULL, derived_key_length = NULL,
    operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
    request = NULL, background = NULL, timeline = NULL,
    fingerprint = @fingerprint,
    response_status = @status, response_headers = @headers, response_body = @body, body_omitted = false,
    expires_at = now() + CASE WHEN @retention_us::bigint > 0 THEN @retention_us::bigint * interval '1 microsecond'
        ELSE GREATEST(expires_at - created_at, @default_retention_us::bigint * interval '1 microsecond') END
WHERE id = @id AND owner_token = @owner_token AND lease_until <= now();

-- name: Reconcile :many
-- The natural keys (migration 008) that more than one completed record
-- holds, among records completed since @since: one intent executed under
-- more than one idempotency key. Each with how many records hold it and
-- when the first and the last completed, the latest first. It reads
-- across placements: an operator's work, served by the partial index.
SELECT natural_key, count(*), min(created_at), max(created_at)
FROM {{schema}}.records
WHERE natural_key IS NOT NULL AND created_at >= @since
GROUP BY natural_key
HAVING count(*) > 1
ORDER BY max(created_at) DESC
LIMIT @limit;
