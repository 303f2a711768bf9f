-- How the derived keys of a record's foreign phases are computed. Records in
-- flight before this migration keep version 1 (namespace, scope, key, phase);
-- new claims use version 2, which also hashes the request fingerprint, so a
-- released key reused with another body never presents a foreign system the
-- same key with other parameters.
ALTER TABLE {{schema}}.records ADD COLUMN key_derivation smallint NOT NULL DEFAULT 1;
ALTER TABLE {{schema}}.records ALTER COLUMN key_derivation SET DEFAULT 2;
