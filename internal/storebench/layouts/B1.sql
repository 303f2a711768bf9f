-- B1: A with the primary key a 16-byte digest (uuid) of namespace, scope
-- and key, and those three text columns dropped; the fingerprint 16 bytes
-- of the SHA-256; state a "char". Loses: no record's key, scope or
-- namespace can be read back (only its digest), and every statement finds
-- records by a digest the engine computes.
CREATE TABLE records (
    id uuid PRIMARY KEY, operation text NOT NULL, fingerprint uuid NOT NULL, state "char" NOT NULL CHECK (state IN ('c', 'd')),
    owner_token uuid, lease_until timestamptz, recovery_point text NOT NULL DEFAULT '', phase_state json, request bytea,
    background boolean NOT NULL DEFAULT false, response_status smallint, response_headers json, response_body bytea,
    body_omitted boolean NOT NULL DEFAULT false, attempts integer NOT NULL DEFAULT 1, created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL, key_derivation smallint NOT NULL DEFAULT 2,
    CHECK ((state = 'c') = (owner_token IS NOT NULL AND lease_until IS NOT NULL))
) WITH (fillfactor = 90);
CREATE INDEX records_expires_at ON records (expires_at);
CREATE INDEX records_abandoned ON records (operation) WHERE state = 'c' AND background;
INSERT INTO records (id, operation, fingerprint, state, recovery_point, phase_state,
    response_status, response_headers, response_body, created_at, expires_at)
SELECT substr(encode(sha256(convert_to('createPayment' || chr(10) || scope || chr(10) || key, 'UTF8')), 'hex'), 1, 32)::uuid,
    'createPayment', substr(encode(fp, 'hex'), 1, 32)::uuid, 'd', 'finish', pstate::json,
    201, headers::json, body, c, c + interval '1 day'
FROM src ORDER BY g;
