package idemvet

import "testing"

// TestSQLWrites: a statement writes when a keyword of a write appears
// outside comments, string literals and quoted identifiers; a row lock's
// UPDATE does not write.
func TestSQLWrites(t *testing.T) {
	for sql, want := range map[string]bool{
		"UPDATE subscribers SET active = false":                            true,
		"insert into hits values ($1)":                                     true,
		"WITH d AS (DELETE FROM s RETURNING id) SELECT count(*) FROM d":    true,
		"MERGE INTO s USING t ON s.id = t.id WHEN MATCHED THEN DO NOTHING": true,
		"SELECT 1; DROP TABLE s":                                           true,
		"SELECT 'it''s'; TRUNCATE s":                                       true,
		"SELECT * FROM s FOR UPDATE":                                       false,
		"SELECT * FROM s FOR NO KEY UPDATE SKIP LOCKED":                    false,
		"SELECT 'DELETE' AS word":                                          false,
		`SELECT "update" FROM s`:                                           false,
		"SELECT 1 -- UPDATE it later\n":                                    false,
		"SELECT /* INSERT */ 1":                                            false,
		"SELECT $$ DROP $$, $1":                                            false,
		"SELECT $a1$ DROP $a1$":                                            false,
		"SELECT updated_at, deleted FROM s":                                false,
		"SET LOCAL statement_timeout = '1s'":                               false,
	} {
		if got := sqlWrites(sql); got != want {
			t.Errorf("sqlWrites(%q) = %v, want %v", sql, got, want)
		}
	}
}
