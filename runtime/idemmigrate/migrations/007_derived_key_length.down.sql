ALTER TABLE {{schema}}.records DROP COLUMN derived_key_length;
