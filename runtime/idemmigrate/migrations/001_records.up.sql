-- One row per (namespace, scope, key): the claim, its progress, and the stored response.
CREATE TABLE {{schema}}.records (
    namespace        text        NOT NULL, -- operationId, or the group name
    scope            text        NOT NULL, -- resolved scope value ('' for global)
    key              text        NOT NULL, -- the Idempotency-Key value
    operation        text        NOT NULL, -- operationId that claimed the key
    fingerprint      bytea       NOT NULL, -- SHA-256 of the canonical request
    state            text        NOT NULL CHECK (state IN ('claimed', 'completed')),
    owner_token      uuid,                 -- fencing token of the current owner; NULL once completed
    lease_until      timestamptz,          -- the owner's lease; NULL once completed
    recovery_point   text        NOT NULL DEFAULT '', -- last committed phase ('' = none)
    phase_state      jsonb,                -- typed phase state saved with the recovery point
    request          bytea,                -- stored request, for background completion
    background       boolean     NOT NULL DEFAULT false,
    response_status  integer,
    response_headers jsonb,
    response_body    bytea,
    body_omitted     boolean     NOT NULL DEFAULT false,
    attempts         integer     NOT NULL DEFAULT 1, -- claims and takeovers
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL, -- created_at + retention
    PRIMARY KEY (namespace, scope, key),
    CHECK ((state = 'claimed') = (owner_token IS NOT NULL AND lease_until IS NOT NULL))
);

CREATE INDEX records_expires_at ON {{schema}}.records (expires_at);

CREATE INDEX records_abandoned ON {{schema}}.records (lease_until)
    WHERE state = 'claimed' AND background;
