-- Back to migration 006, whose engines neither keep a claim's derived-key
-- length nor know key derivation 3: a claim in flight that has either,
-- resumed by one of them, would send its foreign calls under another key
-- than its first attempt did (a second charge). This migration stops while
-- any such claim remains, and says so (by casting its message to an
-- integer; see migration 004). Let them complete (a retry, the completer),
-- or settle them (idemgen abandoned, idemgen resolve), and migrate down
-- again. The table is locked first, so that no claim is made between the
-- check and the drop.
LOCK TABLE {{schema}}.records IN ACCESS EXCLUSIVE MODE;
SELECT (count(*) || ' claims in flight were made with key derivation 3 or keep their derived-key length, which engines before migration 007 cannot resume under the same keys: '
    || 'let them complete, or settle them with idemgen abandoned and idemgen resolve, and migrate down again')::integer
FROM {{schema}}.records
WHERE owner_token IS NOT NULL AND (key_derivation >= 3 OR derived_key_length IS NOT NULL)
HAVING count(*) > 0;
ALTER TABLE {{schema}}.records DROP COLUMN derived_key_length;
