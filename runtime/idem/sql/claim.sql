-- The claim of a key and what a claim reads of the record holding it
-- (engine_claim.go). {{schema}} is the engine's schema; @name is a
-- parameter, bound by name from the statement's params struct
-- (store_params.go). Every statement here is sent as it appears in
-- testdata/statements.golden.sql.

-- name: Claim :execrows
-- Claims a key nobody holds: the record, with this execution as its owner
-- (@owner_token) for a lease from now. A key that is held inserts nothing;
-- the claim then reads the record that holds it (Read). A record is found by
-- its id alone, recordID of its namespace, scope and key (migration 005).
-- A key held by a claim not yet committed (a ClaimFirst claim, whose
-- transaction runs its phases) is waited on for at most the claim wait
-- (@lock_timeout, in milliseconds), set for the statement's own transaction
-- by a one-time filter, evaluated before the row is formed and so before the
-- insert looks at the index: past it the claim fails with
-- lock_not_available, a 409. The filter first keeps the lock_timeout in
-- force (the session's, or what the transaction set) in
-- idemgen.lock_timeout, by the inner set_config, whose result is the outer
-- one's is_local (true): an argument is evaluated before its function runs,
-- where the order of ANDed filters is the planner's. RETURNING, evaluated
-- once the row is in the index, restores it: in a ClaimFirst claim's
-- transaction the phases, and the COMMIT that runs their deferred checks,
-- wait as they would in a plain transaction. A claim that inserts nothing
-- restores nothing; its transaction is rolled back.
INSERT INTO {{schema}}.records (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation, derived_key_length, timeline)
SELECT @id, @namespace, @scope, @key, @owner_token, @operation, @fingerprint,
    now() + @lease_us::bigint * interval '1 microsecond', @request, @background,
    now() + @retention_us::bigint * interval '1 microsecond', @key_derivation, @derived_key_length, {{schema}}.timeline()
WHERE set_config('lock_timeout', @lock_timeout,
    set_config('idemgen.lock_timeout', current_setting('lock_timeout'), true) IS NOT NULL) IS NOT NULL
ON CONFLICT DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idemgen.lock_timeout'), true);

-- name: ClaimAsync :execrows
-- Claim, committed without waiting for the WAL flush
-- (Options.AsyncClaimCommit): set_config(..., true) is local to the
-- statement's own transaction and read at its commit. As a one-time filter
-- it runs once, before the row is formed, and costs no plan node of its own.
INSERT INTO {{schema}}.records (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation, derived_key_length, timeline)
SELECT @id, @namespace, @scope, @key, @owner_token, @operation, @fingerprint,
    now() + @lease_us::bigint * interval '1 microsecond', @request, @background,
    now() + @retention_us::bigint * interval '1 microsecond', @key_derivation, @derived_key_length, {{schema}}.timeline()
WHERE set_config('lock_timeout', @lock_timeout, true) IS NOT NULL
    AND set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT DO NOTHING;

-- name: Read :one
-- The record holding a key, as a claim decides on it: its state (claimed
-- while it has an owner), whether the owner's lease is live and for how
-- long, whether it is past its retention, its recovery point and state, and
-- its stored response. The row shape is ClaimRead's, decoded by scanRecord;
-- its state is '' where ClaimRead's join finds no record.
SELECT coalesce(r.operation, ''), r.fingerprint,
    CASE WHEN r.owner_token IS NOT NULL THEN 'claimed' WHEN r.id IS NOT NULL THEN 'completed' ELSE '' END,
    r.owner_token, coalesce(r.lease_until > now(), false),
    coalesce(extract(epoch FROM r.lease_until - now()), 0)::float8, coalesce(r.expires_at <= now(), false),
    coalesce(extract(epoch FROM r.expires_at - now()), 0)::float8, coalesce(r.recovery_point, ''), r.phase_state,
    r.response_status, r.response_headers, r.response_body, coalesce(r.body_omitted, false)
FROM {{schema}}.records AS r
WHERE r.id = @id;

-- name: ClaimRead :one
-- The first statement of a ClaimFirst claim, sent in one batch after BEGIN
-- and before Claim (see store.claimInTx): Read's row (all NULL
-- when no record holds the key), and, for the claim's transaction, the
-- settings that bound it by the lease, since an uncommitted claim cannot be
-- taken over: statement_timeout and idle_in_transaction_session_timeout.
-- The settings are a subquery's volatile outputs, which the planner keeps
-- and evaluates once, for the one row the join starts from.
SELECT coalesce(r.operation, ''), r.fingerprint,
    CASE WHEN r.owner_token IS NOT NULL THEN 'claimed' WHEN r.id IS NOT NULL THEN 'completed' ELSE '' END,
    r.owner_token, coalesce(r.lease_until > now(), false),
    coalesce(extract(epoch FROM r.lease_until - now()), 0)::float8, coalesce(r.expires_at <= now(), false),
    coalesce(extract(epoch FROM r.expires_at - now()), 0)::float8, coalesce(r.recovery_point, ''), r.phase_state,
    r.response_status, r.response_headers, r.response_body, coalesce(r.body_omitted, false)
FROM (SELECT set_config('statement_timeout', @statement_timeout, true) AS statement_timeout,
        set_config('idle_in_transaction_session_timeout', @statement_timeout, true) AS idle_timeout) AS settings
    LEFT JOIN {{schema}}.records AS r ON r.id = @id;

-- name: Takeover :one
-- Installs a new owner (@new_owner) on a claimed record whose lease expired,
-- if its owner is still the one observed (@owner_token). The lease condition
-- is checked again here, not only in the read before it: the owner may have
-- refreshed in between. The retention runs at least from now. It returns
-- how the record's derived keys are made (migrations 002 and 007: NULL for
-- a claim made before 007), and whether the record was last written on
-- another timeline than the primary's now (migration 006): the execution
-- crossed a failover.
UPDATE {{schema}}.records
SET owner_token = @new_owner,
    lease_until = clock_timestamp() + @lease_us::bigint * interval '1 microsecond',
    expires_at = GREATEST(expires_at, clock_timestamp() + @retention_us::bigint * interval '1 microsecond'),
    attempts = attempts + 1
WHERE id = @id AND owner_token = @owner_token AND lease_until <= now()
RETURNING recovery_point, phase_state, key_derivation, derived_key_length, coalesce(timeline <> {{schema}}.timeline(), false);

-- name: DeleteExpired :execrows
-- Frees a key whose record is past its retention: completed, or claimed by
-- nobody live with no committed phase. A record with a recovery point is
-- never freed, whatever its age: its committed phases would run again.
DELETE FROM {{schema}}.records
WHERE id = @id
    AND expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''));

-- name: Watch :many
-- The state of the keys duplicates wait on (wait.go): each record of
-- @ids, as 1 (claimed, its owner's lease running), 2 (completed) or 3
-- (claimed, its owner's lease run out). A key with no row is free. One
-- query for every key an engine's requests wait on.
SELECT id, CASE WHEN owner_token IS NULL THEN 2 WHEN lease_until > now() THEN 1 ELSE 3 END
FROM {{schema}}.records
WHERE id = ANY(@ids);
