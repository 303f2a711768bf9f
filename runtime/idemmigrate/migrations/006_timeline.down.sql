ALTER TABLE {{schema}}.records DROP COLUMN timeline;
DROP FUNCTION {{schema}}.timeline();
