-- E3b: D2 without the state column (a record is claimed while it has an
-- owner), without created_at, attempts a smallint, the headers as
-- "Name: value" lines instead of json, and the phase state and recovery
-- point cleared when the record completes. Loses, on top of D2's: the
-- record's age, and its phase state and last phase once completed.
CREATE TABLE records (
    expires_at timestamptz NOT NULL, lease_until timestamptz,
    id uuid PRIMARY KEY, fingerprint uuid NOT NULL, owner_token uuid,
    operation integer NOT NULL, response_status smallint, key_derivation smallint NOT NULL DEFAULT 2, attempts smallint NOT NULL DEFAULT 1,
    background boolean NOT NULL DEFAULT false, body_omitted boolean NOT NULL DEFAULT false,
    recovery_point text NOT NULL DEFAULT '', phase_state json, response_headers text, response_body bytea, request bytea,
    CHECK ((owner_token IS NULL) = (lease_until IS NULL))
) WITH (fillfactor = 100);
CREATE INDEX records_expires_at ON records USING brin (expires_at);
CREATE INDEX records_abandoned ON records (operation) WHERE owner_token IS NOT NULL AND background;
INSERT INTO records (id, operation, fingerprint, recovery_point, phase_state,
    response_status, response_headers, response_body, expires_at)
SELECT substr(encode(sha256(convert_to('createPayment' || chr(10) || scope || chr(10) || key, 'UTF8')), 'hex'), 1, 32)::uuid,
    hashtext('createPayment'), substr(encode(fp, 'hex'), 1, 32)::uuid, '', NULL,
    201, 'Content-Type: application/json' || chr(10) || 'Location: /payments/' || g, body, c + interval '1 day'
FROM src ORDER BY g;
