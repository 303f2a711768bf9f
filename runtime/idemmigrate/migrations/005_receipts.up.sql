-- A completed record keeps what a replay needs and nothing more (issue 12;
-- docs/internals.md, "The record").
--
-- A record is a claim while it executes and a receipt once it completes.
-- The claim needs its key, operation, owner, lease, recovery point, phase
-- state, stored request and attempts; the receipt needs only to be found
-- by its key, to tell a retry from a different request, to replay the
-- response, and to expire. So a record is found by id, a digest of
-- (namespace, scope, key) that the engine computes and sends with each
-- statement, and completion clears everything else: the key's
-- text, the operation (folded into the fingerprint), the phase state and
-- recovery point, created_at, attempts and the key derivation. The state
-- column goes: a record is claimed exactly while it has an owner.
--
-- The table is made anew, its columns in an order that wastes no padding,
-- and the records copied into it under an ACCESS EXCLUSIVE lock: claims
-- wait for it (see docs/operations.md). Grants on the table, and indexes
-- or triggers of your own on it, must be made again; a view over it stops
-- the migration at DROP TABLE, and must be dropped first.

-- The table is locked first: a service that writes while the records are
-- copied would otherwise commit into the table about to be dropped, and
-- its claim or completion would be lost (TestUpgradeWaitsForWriters).
LOCK TABLE {{schema}}.records IN ACCESS EXCLUSIVE MODE;

-- The record's id, as the engine's recordID computes it, for this
-- migration, operators' queries and tools: 16 bytes of SHA-256 over the
-- three parts' UTF-8 bytes, each preceded by its length in bytes (as
-- DeriveKey hashes them; octet_length of the text itself would count the
-- database's encoding, which need not be UTF-8). A
-- key that is a UUIDv7, as runtime/idemclient makes them, lends its first
-- 8 bytes (its time) to the id's first 8, so that new records arrive in
-- the primary key's order and fill its pages instead of splitting them.
--
-- Both functions are STABLE, as convert_to is, and not STRICT, so that
-- the planner inlines them into a query: one it cannot inline is called
-- through the SQL function executor, about 80 µs a call.
CREATE FUNCTION {{schema}}.record_id(namespace text, scope text, key text) RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN encode(CASE WHEN key ~* '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
        THEN decode(substr(replace(key, '-', ''), 1, 16), 'hex') || substr(sha256(int4send(octet_length(convert_to(namespace, 'UTF8'))) || convert_to(namespace, 'UTF8')
            || int4send(octet_length(convert_to(scope, 'UTF8'))) || convert_to(scope, 'UTF8') || int4send(octet_length(convert_to(key, 'UTF8'))) || convert_to(key, 'UTF8')), 1, 8)
        ELSE substr(sha256(int4send(octet_length(convert_to(namespace, 'UTF8'))) || convert_to(namespace, 'UTF8')
            || int4send(octet_length(convert_to(scope, 'UTF8'))) || convert_to(scope, 'UTF8') || int4send(octet_length(convert_to(key, 'UTF8'))) || convert_to(key, 'UTF8')), 1, 16)
        END, 'hex')::uuid;

-- A receipt's fingerprint, as the engine's receiptFingerprint computes
-- it: 16 bytes of SHA-256 over the operation (its length first) and the
-- request's fingerprint, so that a retry of another operation, or with
-- another request, differs from it.
CREATE FUNCTION {{schema}}.receipt_fingerprint(operation text, fingerprint bytea) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN substr(sha256(int4send(octet_length(convert_to(operation, 'UTF8'))) || convert_to(operation, 'UTF8') || fingerprint), 1, 16);

-- Fixed-width columns first, widest first, then the variable ones: a
-- receipt's row is the tuple header (32), expires_at, id, the status, a
-- flag, the fingerprint (17), the headers and the body; every other
-- column is NULL and costs nothing. With the bench's two headers and a
-- 37-byte body that is 152 bytes, a multiple of 8, as PostgreSQL aligns a
-- row on its page: one byte more and each row would take 160.
CREATE TABLE {{schema}}.records_005 (
    expires_at       timestamptz NOT NULL, -- end of retention
    lease_until      timestamptz,          -- the owner's lease; NULL once completed
    created_at       timestamptz DEFAULT now(), -- the claim's start; NULL once completed
    id               uuid        NOT NULL, -- record_id(namespace, scope, key)
    owner_token      uuid,                 -- fencing token of the current owner; NULL once completed
    attempts         integer     DEFAULT 1, -- claims and takeovers; NULL once completed
    response_status  smallint,
    key_derivation   smallint    DEFAULT 2, -- DeriveKey's version; NULL once completed
    background       boolean     DEFAULT false, -- completed by the background completer; NULL once completed
    body_omitted     boolean     NOT NULL DEFAULT false,
    fingerprint      bytea       NOT NULL, -- the request's; once completed, receipt_fingerprint(operation, it)
    recovery_point   text        DEFAULT '', -- last committed phase ('' = none); NULL once completed
    namespace        text,                 -- operationId, or the group name; NULL once completed
    scope            text,                 -- resolved scope value ('' for global); NULL once completed
    key              text,                 -- the Idempotency-Key value; NULL once completed
    operation        text,                 -- operationId that claimed the key; NULL once completed
    phase_state      json,                 -- typed phase state saved with the recovery point; NULL once completed
    request          bytea,                -- stored request, for background completion
    response_headers bytea,                -- the response's headers, coded (headers.go); JSON if written before this migration
    response_body    bytea,
    CHECK ((owner_token IS NULL) = (lease_until IS NULL)),
    CHECK (owner_token IS NULL OR (namespace IS NOT NULL AND scope IS NOT NULL AND key IS NOT NULL AND operation IS NOT NULL
        AND created_at IS NOT NULL AND attempts IS NOT NULL AND key_derivation IS NOT NULL AND background IS NOT NULL
        AND recovery_point IS NOT NULL))
) WITH (fillfactor = 90);

-- A claimed record is copied as it is; a completed one becomes a receipt.
-- Headers keep the JSON they were written in (the engine reads both).
INSERT INTO {{schema}}.records_005 (expires_at, lease_until, created_at, id, owner_token, attempts, response_status,
    key_derivation, background, body_omitted, fingerprint, recovery_point, namespace, scope, key, operation,
    phase_state, request, response_headers, response_body)
SELECT expires_at, CASE WHEN claimed THEN lease_until END, CASE WHEN claimed THEN created_at END,
    {{schema}}.record_id(namespace, scope, key), CASE WHEN claimed THEN owner_token END, CASE WHEN claimed THEN attempts END, response_status, CASE WHEN claimed THEN key_derivation END,
    CASE WHEN claimed THEN background END, body_omitted,
    CASE WHEN claimed THEN fingerprint ELSE {{schema}}.receipt_fingerprint(operation, fingerprint) END,
    CASE WHEN claimed THEN recovery_point END,
    CASE WHEN claimed THEN namespace END, CASE WHEN claimed THEN scope END, CASE WHEN claimed THEN key END,
    CASE WHEN claimed THEN operation END, CASE WHEN claimed THEN phase_state END, CASE WHEN claimed THEN request END,
    convert_to(response_headers::text, 'UTF8'), response_body
FROM {{schema}}.records, LATERAL (SELECT state = 'claimed' AS claimed) AS s
ORDER BY expires_at;

DROP TABLE {{schema}}.records;
ALTER TABLE {{schema}}.records_005 RENAME TO records;
ALTER TABLE {{schema}}.records ADD CONSTRAINT records_pkey PRIMARY KEY (id);
CREATE INDEX records_expires_at ON {{schema}}.records (expires_at);
-- As in migrations 003 and 004, with the claimed records now those with
-- an owner. Neither names a column a lease refresh changes.
CREATE INDEX records_abandoned ON {{schema}}.records (operation) WHERE owner_token IS NOT NULL AND background;
CREATE INDEX records_claimed ON {{schema}}.records (expires_at) WHERE owner_token IS NOT NULL;
