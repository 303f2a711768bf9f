-- Back to migration 007: completed records forget their natural keys.
DROP INDEX {{schema}}.records_natural_key;
ALTER TABLE {{schema}}.records DROP COLUMN natural_key;
