-- E8a: E3b with a clock-ordered primary key (the UUIDv7 key's first 8
-- bytes, then 8 bytes of the digest, so that new entries fill the index's
-- last page), the headers coded (a byte for a known name, then the value),
-- and fillfactor 90 again. Loses, on top of E3b's: headers readable only
-- through the engine's code table, and a key that is not a UUIDv7 has no
-- clock order to lend (its entries land anywhere in the index).
CREATE TABLE records (
    expires_at timestamptz NOT NULL, lease_until timestamptz,
    id uuid PRIMARY KEY, fingerprint uuid NOT NULL, owner_token uuid,
    operation integer NOT NULL, response_status smallint, key_derivation smallint NOT NULL DEFAULT 2, attempts smallint NOT NULL DEFAULT 1,
    background boolean NOT NULL DEFAULT false, body_omitted boolean NOT NULL DEFAULT false,
    recovery_point text NOT NULL DEFAULT '', phase_state json, response_headers bytea, response_body bytea, request bytea,
    CHECK ((owner_token IS NULL) = (lease_until IS NULL))
) WITH (fillfactor = 90);
CREATE INDEX records_expires_at ON records USING brin (expires_at);
CREATE INDEX records_abandoned ON records (operation) WHERE owner_token IS NOT NULL AND background;
INSERT INTO records (id, operation, fingerprint, recovery_point, phase_state,
    response_status, response_headers, response_body, expires_at)
SELECT (substr(replace(key, '-', ''), 1, 16) || substr(encode(sha256(convert_to('createPayment' || chr(10) || scope || chr(10) || key, 'UTF8')), 'hex'), 1, 16))::uuid,
    hashtext('createPayment'), substr(encode(fp, 'hex'), 1, 32)::uuid, '', NULL,
    201, decode('01', 'hex') || convert_to('application/json', 'UTF8') || decode('0002', 'hex') || convert_to('/payments/' || g, 'UTF8'),
    body, c + interval '1 day'
FROM src ORDER BY g;
