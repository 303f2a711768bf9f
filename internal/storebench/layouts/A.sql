-- A: today's layout. The table and its indexes are the engine's migrations
-- (idemmigrate's Up, run into this schema before this file); this file only
-- loads the records as the engine stores a completed one (migration 005):
-- the id, a digest of namespace, scope and key, in the primary key; the
-- receipt's 16-byte fingerprint; the status, the headers coded and the
-- body; the expiry. Every other column is NULL.
INSERT INTO records (id, fingerprint, response_status, response_headers, response_body,
    created_at, attempts, key_derivation, background, recovery_point, expires_at)
SELECT record_id('createPayment', scope, key), receipt_fingerprint('createPayment', fp), 201,
    '\x1f10'::bytea || convert_to('application/json', 'UTF8') || '\x2e'::bytea
        || set_byte('\x00'::bytea, 0, length('/payments/' || g)) || convert_to('/payments/' || g, 'UTF8'),
    body, NULL, NULL, NULL, NULL, NULL, c + interval '1 day'
FROM src ORDER BY g;
