-- D2: B1 with the operation a 4-byte hash (hashtext) of its name, the
-- columns ordered widest first so that no alignment padding remains, a BRIN
-- index on expires_at instead of the B-tree, and fillfactor 100. Loses, on
-- top of B1's: the operation's name (only its hash), HOT lease refreshes
-- on full pages, and the BRIN caveats (docs/scaling.md).
CREATE TABLE records (
    expires_at timestamptz NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), lease_until timestamptz,
    id uuid PRIMARY KEY, fingerprint uuid NOT NULL, owner_token uuid,
    operation integer NOT NULL, attempts integer NOT NULL DEFAULT 1,
    response_status smallint, key_derivation smallint NOT NULL DEFAULT 2,
    state "char" NOT NULL CHECK (state IN ('c', 'd')), background boolean NOT NULL DEFAULT false, body_omitted boolean NOT NULL DEFAULT false,
    recovery_point text NOT NULL DEFAULT '', phase_state json, response_headers json, response_body bytea, request bytea,
    CHECK ((state = 'c') = (owner_token IS NOT NULL AND lease_until IS NOT NULL))
) WITH (fillfactor = 100);
CREATE INDEX records_expires_at ON records USING brin (expires_at);
CREATE INDEX records_abandoned ON records (operation) WHERE state = 'c' AND background;
INSERT INTO records (id, operation, fingerprint, state, recovery_point, phase_state,
    response_status, response_headers, response_body, created_at, expires_at)
SELECT substr(encode(sha256(convert_to('createPayment' || chr(10) || scope || chr(10) || key, 'UTF8')), 'hex'), 1, 32)::uuid,
    hashtext('createPayment'), substr(encode(fp, 'hex'), 1, 32)::uuid, 'd', 'finish', pstate::json,
    201, headers::json, body, c, c + interval '1 day'
FROM src ORDER BY g;
