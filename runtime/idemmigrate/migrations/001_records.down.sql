DROP TABLE IF EXISTS {{schema}}.records;
