-- The records of the layout study, one row per record before any layout
-- shapes it: the bench loader's (loadSQL in bench.go), plus the bench
-- operation's one-field phase state kept on completion, as in the first
-- study and docs/scaling.md's figures (loadSQL stores none). Record g
-- (10,000,001 on) completes g - 10,000,001 microseconds after the statement
-- started, with a UUIDv7 key of that time as runtime/idemclient makes them,
-- a scope among 5,000, a SHA-256 fingerprint, the 37-byte body the bench's
-- operation answers with and its two headers. $1 is the number of records.
CREATE UNLOGGED TABLE src AS
SELECT g,
    (lpad(to_hex(us / 1000), 12, '0') || '7' || lpad(to_hex((us % 1000) * 4096 / 1000), 3, '0') || '8' || substr(h, 1, 15))::uuid::text AS key,
    'acct_' || lpad((g % 5000)::text, 4, '0') AS scope,
    sha256(int8send(g)) AS fp,
    '{"Content-Type":["application/json"],"Location":["/payments/' || g || '"]}' AS headers,
    '{"payment_id":' || g || '}' AS pstate,
    convert_to('{"id":' || g || ',"status":"succeeded"}', 'UTF8') AS body,
    c
FROM generate_series(10000001::bigint, 10000000 + $1::bigint) AS g,
    LATERAL (SELECT statement_timestamp() + (g - 10000001) * interval '1 microsecond' AS c, md5(g::text) AS h) AS t,
    LATERAL (SELECT (extract(epoch FROM c) * 1000000)::bigint AS us) AS k
ORDER BY g;
