ALTER TABLE {{schema}}.records DROP COLUMN key_derivation;
