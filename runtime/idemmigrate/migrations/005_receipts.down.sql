-- Back to the table of migration 004. A receipt keeps no key, so it cannot
-- go back: this migration stops while any completed record remains, and
-- says so (by casting its message to an integer; see migration 004). Wait
-- until they are past retention and pruned, or delete them, knowing that
-- a retry of a deleted one's request runs it again. The table is locked
-- first, so that nothing is written between the check and the copy.
LOCK TABLE {{schema}}.records IN ACCESS EXCLUSIVE MODE;
SELECT (count(*) || ' completed records keep no key and cannot be reverted to migration 004: '
    || 'prune them once past retention, or DELETE FROM {{schema}}.records WHERE owner_token IS NULL, and migrate down again')::integer
FROM {{schema}}.records WHERE owner_token IS NULL HAVING count(*) > 0;

CREATE TABLE {{schema}}.records_004 (
    namespace        text        NOT NULL,
    scope            text        NOT NULL,
    key              text        NOT NULL,
    operation        text        NOT NULL,
    fingerprint      bytea       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('claimed', 'completed')),
    owner_token      uuid,
    lease_until      timestamptz,
    recovery_point   text        NOT NULL DEFAULT '',
    phase_state      json,
    request          bytea,
    background       boolean     NOT NULL DEFAULT false,
    response_status  smallint,
    response_headers json,
    response_body    bytea,
    body_omitted     boolean     NOT NULL DEFAULT false,
    attempts         integer     NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    key_derivation   smallint    NOT NULL DEFAULT 2,
    CHECK ((state = 'claimed') = (owner_token IS NOT NULL AND lease_until IS NOT NULL))
) WITH (fillfactor = 90);
INSERT INTO {{schema}}.records_004 (namespace, scope, key, operation, fingerprint, state, owner_token, lease_until,
    recovery_point, phase_state, request, background, response_status, response_body, body_omitted, attempts,
    created_at, expires_at, key_derivation)
SELECT namespace, scope, key, operation, fingerprint, 'claimed', owner_token, lease_until, recovery_point, phase_state,
    request, background, response_status, response_body, body_omitted, attempts, created_at, expires_at, key_derivation
FROM {{schema}}.records;
DROP TABLE {{schema}}.records;
ALTER TABLE {{schema}}.records_004 RENAME TO records;
ALTER TABLE {{schema}}.records ADD CONSTRAINT records_pkey PRIMARY KEY (key, scope, namespace);
CREATE INDEX records_expires_at ON {{schema}}.records (expires_at);
CREATE INDEX records_abandoned ON {{schema}}.records (operation) WHERE state = 'claimed' AND background;
CREATE INDEX records_claimed ON {{schema}}.records (expires_at) WHERE state = 'claimed';
DROP FUNCTION {{schema}}.receipt_fingerprint(text, bytea);
DROP FUNCTION {{schema}}.record_id(text, text, text);
