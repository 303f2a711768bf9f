-- A completed execution's natural key (x-idempotency natural-key): a
-- 16-byte digest of its operation and the request values that identify its
-- intent in business terms, such as an order reference, never the values
-- themselves. Two completed records with one natural key are one intent
-- executed twice under two idempotency keys (a client that minted a key per
-- attempt, a failover that lost a record): idemgen reconcile lists them.
-- A record with one keeps created_at, as the time it completed.
--
-- Adding a column with no default rewrites nothing, and the index holds
-- only records that have one: a record without costs nothing more.
ALTER TABLE {{schema}}.records ADD COLUMN natural_key bytea;
CREATE INDEX IF NOT EXISTS records_natural_key ON {{schema}}.records (natural_key, created_at) WHERE natural_key IS NOT NULL;
