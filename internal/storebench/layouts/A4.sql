-- A4: the layout of migrations 003 and 004, before 005 made a completed
-- record a receipt: key, scope and namespace as text in every record, the
-- primary key on the three, the operation, a 32-byte fingerprint, state,
-- created_at, the last phase and its state, headers as json, fillfactor 90.
CREATE TABLE records (
    namespace text NOT NULL, scope text NOT NULL, key text NOT NULL, operation text NOT NULL, fingerprint bytea NOT NULL,
    state text NOT NULL CHECK (state IN ('claimed', 'completed')), owner_token uuid, lease_until timestamptz,
    recovery_point text NOT NULL DEFAULT '', phase_state json, request bytea, background boolean NOT NULL DEFAULT false,
    response_status smallint, response_headers json, response_body bytea, body_omitted boolean NOT NULL DEFAULT false,
    attempts integer NOT NULL DEFAULT 1, created_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
    key_derivation smallint NOT NULL DEFAULT 2,
    PRIMARY KEY (key, scope, namespace),
    CHECK ((state = 'claimed') = (owner_token IS NOT NULL AND lease_until IS NOT NULL))
) WITH (fillfactor = 90);
CREATE INDEX records_expires_at ON records (expires_at);
CREATE INDEX records_abandoned ON records (operation) WHERE state = 'claimed' AND background;
CREATE INDEX records_claimed ON records (expires_at) WHERE state = 'claimed';
INSERT INTO records (key, scope, namespace, operation, fingerprint, state, recovery_point, phase_state,
    response_status, response_headers, response_body, created_at, expires_at)
SELECT key, scope, 'createPayment', 'createPayment', fp, 'completed', 'finish', pstate::json,
    201, headers::json, body, c, c + interval '1 day'
FROM src ORDER BY g;
