-- E10b: E8a with the B-tree on expires_at instead of BRIN, fillfactor
-- 100, and namespace, scope and key kept as text while a record is claimed,
-- NULL once it completes (these records all are). The smallest without
-- BRIN. Loses what E8a does but the BRIN caveats and the keys of records
-- in flight; and, at fillfactor 100, HOT lease refreshes on full pages.
CREATE TABLE records (
    expires_at timestamptz NOT NULL, lease_until timestamptz,
    id uuid PRIMARY KEY, fingerprint uuid NOT NULL, owner_token uuid,
    operation integer NOT NULL, response_status smallint, key_derivation smallint NOT NULL DEFAULT 2, attempts smallint NOT NULL DEFAULT 1,
    background boolean NOT NULL DEFAULT false, body_omitted boolean NOT NULL DEFAULT false,
    namespace text, scope text, key text, recovery_point text NOT NULL DEFAULT '', phase_state json,
    response_headers bytea, response_body bytea, request bytea,
    CHECK ((owner_token IS NULL) = (lease_until IS NULL))
) WITH (fillfactor = 100);
CREATE INDEX records_expires_at ON records (expires_at);
CREATE INDEX records_abandoned ON records (operation) WHERE owner_token IS NOT NULL AND background;
INSERT INTO records (id, operation, fingerprint, recovery_point, phase_state,
    response_status, response_headers, response_body, expires_at)
SELECT (substr(replace(key, '-', ''), 1, 16) || substr(encode(sha256(convert_to('createPayment' || chr(10) || scope || chr(10) || key, 'UTF8')), 'hex'), 1, 16))::uuid,
    hashtext('createPayment'), substr(encode(fp, 'hex'), 1, 32)::uuid, '', NULL,
    201, decode('01', 'hex') || convert_to('application/json', 'UTF8') || decode('0002', 'hex') || convert_to('/payments/' || g, 'UTF8'),
    body, c + interval '1 day'
FROM src ORDER BY g;
