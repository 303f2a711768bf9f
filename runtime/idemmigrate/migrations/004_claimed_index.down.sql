DROP INDEX {{schema}}.records_claimed;
