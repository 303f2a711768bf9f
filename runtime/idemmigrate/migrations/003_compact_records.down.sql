-- Back to the layout of migration 002. completed_at comes back empty (the
-- engine before 003 wrote it but never read it). A phase state holding the
-- escape \u0000, which json accepts and jsonb refuses, stops this migration.
DROP INDEX {{schema}}.records_abandoned;
ALTER TABLE {{schema}}.records
    ADD COLUMN completed_at timestamptz,
    ALTER COLUMN phase_state TYPE jsonb USING phase_state::jsonb,
    ALTER COLUMN response_headers TYPE jsonb USING response_headers::jsonb,
    ALTER COLUMN response_status TYPE integer,
    DROP CONSTRAINT records_pkey,
    ADD CONSTRAINT records_pkey PRIMARY KEY (namespace, scope, key),
    RESET (fillfactor);
CREATE INDEX records_abandoned ON {{schema}}.records (lease_until) WHERE state = 'claimed' AND background;
