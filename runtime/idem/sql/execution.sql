-- What an execution writes to its own record: progress, its response, its
-- lease, its end (engine_execute.go, engine_lease.go, engine_fail.go). Every
-- statement on a claimed record is fenced by the owner token
-- (owner_token = @owner_token): a stale owner's statement matches no row.
-- Lease and retention arithmetic uses clock_timestamp(), not the
-- transaction's start.

-- name: Advance :one
-- Stores a recovery point and the phase state with it, sent with COMMIT in
-- one round trip (store.commitProgress). A fenced statement that matches no
-- row divides by zero, which aborts the transaction, so the COMMIT sent
-- with it cannot commit a stale owner's writes. Neither lease_until nor
-- expires_at moves backwards: a commit at the end of a long phase must not
-- undo the refreshes made during it.
WITH advanced AS (
    UPDATE {{schema}}.records
    SET recovery_point = @recovery_point, phase_state = @phase_state, timeline = {{schema}}.timeline(),
        lease_until = GREATEST(lease_until, clock_timestamp() + @lease_us::bigint * interval '1 microsecond'),
        expires_at = GREATEST(expires_at, clock_timestamp() + @retention_us::bigint * interval '1 microsecond')
    WHERE id = @id AND owner_token = @owner_token
    RETURNING 1)
SELECT 1 / count(*) FROM advanced;

-- name: Complete :one
-- Completes a claimed record with its response, sent with COMMIT
-- (store.commitResponse), fenced as Advance is. Everything only the
-- execution needed is cleared (migration 005), and the fingerprint becomes
-- the receipt's, which takes in the operation (receiptFingerprint). A
-- completed record is remembered for the whole retention from its
-- completion. For a request with a natural key (migration 008) the engine
-- sends CompleteNatural, made from this block by natural.go, so that it
-- keeps every clause of this one.
WITH completed AS (
    UPDATE {{schema}}.records
    SET owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL, key_derivation = NULL, derived_key_length = NULL,
        operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
        request = NULL, background = NULL, timeline = NULL,
        fingerprint = @fingerprint, response_status = @status, response_headers = @headers,
        response_body = @body, body_omitted = @body_omitted,
        expires_at = clock_timestamp() + @retention_us::bigint * interval '1 microsecond'
    WHERE id = @id AND owner_token = @owner_token
    RETURNING 1)
SELECT 1 / count(*) FROM completed;

-- name: InsertCompleted :exec
-- The completed record of a ClaimLast execution, inserted just before its
-- COMMIT (store.commitRecord). A record already there (a concurrent
-- duplicate that committed first) is a unique violation of records_pkey; an
-- uncommitted one is waited on for at most the claim wait, set for this
-- transaction by a one-time filter (evaluated before the row is formed)
-- before the insert looks at the index. As in Claim, the filter keeps the
-- lock_timeout in force (what the phases left) and RETURNING restores it,
-- for the COMMIT that runs their deferred checks. InsertCompletedNatural is
-- made from it as CompleteNatural is from Complete (natural.go).
INSERT INTO {{schema}}.records (id, fingerprint, response_status, response_headers, response_body,
    body_omitted, expires_at, created_at, attempts, key_derivation, background, recovery_point)
SELECT @id, @fingerprint, @status, @headers, @body, @body_omitted,
    clock_timestamp() + @retention_us::bigint * interval '1 microsecond', NULL, NULL, NULL, NULL, NULL
WHERE set_config('lock_timeout', @lock_timeout,
    set_config('idemgen.lock_timeout', current_setting('lock_timeout'), true) IS NOT NULL) IS NOT NULL
RETURNING set_config('lock_timeout', current_setting('idemgen.lock_timeout'), true);

-- name: CommitAsync :exec
-- Commits a claim without waiting for the WAL flush
-- (Options.AsyncClaimCommit), for a ClaimFirst claim whose first phase is
-- foreign.
SET LOCAL synchronous_commit = off; COMMIT;

-- name: Release :execrows
-- Deletes a claim whose execution failed with no effect. It also requires
-- the recovery point this execution last saw: if a commit whose
-- acknowledgement was lost did advance it, effects exist and the record
-- must stay.
DELETE FROM {{schema}}.records
WHERE id = @id AND owner_token = @owner_token AND recovery_point = @recovery_point;

-- name: Yield :exec
-- Gives the lease up at once, so that a retry can resume without waiting
-- for it to expire.
UPDATE {{schema}}.records
SET lease_until = now()
WHERE id = @id AND owner_token = @owner_token;

-- name: Refresh :execrows
-- Extends the lease while the execution runs (keeper), never backwards.
UPDATE {{schema}}.records
SET lease_until = GREATEST(lease_until, clock_timestamp() + @lease_us::bigint * interval '1 microsecond')
WHERE id = @id AND owner_token = @owner_token;
