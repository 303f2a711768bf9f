-- A: today's layout. The table and its indexes are the engine's migrations
-- (idem.Migrate, run into this schema before this file); this file only
-- loads the records as the engine stores a completed one: key, scope and
-- namespace as text, the primary key on the three, a 32-byte fingerprint,
-- state 'completed', headers and phase state as json, fillfactor 90.
INSERT INTO records (key, scope, namespace, operation, fingerprint, state, recovery_point, phase_state,
    response_status, response_headers, response_body, created_at, expires_at)
SELECT key, scope, 'createPayment', 'createPayment', fp, 'completed', 'finish', pstate::json,
    201, headers::json, body, c, c + interval '1 day'
FROM src ORDER BY g;
