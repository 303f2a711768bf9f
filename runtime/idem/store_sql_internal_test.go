package idem

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/statements.golden.sql from sql/*.sql")

const statementsGolden = "testdata/statements.golden.sql"

// TestStatementsGolden keeps testdata/statements.golden.sql equal to every
// statement as the engine sends it (schema idemgen), and
// testdata/statements.citus.golden.sql to every statement as it sends them
// to a distributed records table, so that a change to sql/ shows in its
// diff the SQL that runs. go test -run TestStatementsGolden -update
// rewrites them.
func TestStatementsGolden(t *testing.T) {
	t.Parallel()
	for _, g := range []struct {
		file  string
		citus bool
		head  string
	}{
		{statementsGolden, false, "-- Every statement of sql/*.sql as the engine sends it, for schema idemgen.\n"},
		{"testdata/statements.citus.golden.sql", true, "-- Every statement as the engine sends it to a Citus distributed records table\n" +
			"-- (sql/*.sql, with sql/citus/*.sql in place of the blocks it names), for schema idemgen.\n"},
	} {
		q, err := loadStatements(DefaultSchema, g.citus)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString(g.head + "-- Written by TestStatementsGolden -update; do not edit.\n")
		q.each(func(name, kind, sql string, params []string) {
			fmt.Fprintf(&b, "\n-- name: %s %s\n", name, kind)
			for i, p := range params {
				fmt.Fprintf(&b, "-- $%d: @%s\n", i+1, p)
			}
			b.WriteString(sql + ";\n")
		})
		if *update {
			if err := os.WriteFile(g.file, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(g.file)
		if err != nil {
			t.Fatalf("%v (go test ./runtime/idem -run TestStatementsGolden -update writes it)", err)
		}
		if diff := cmp.Diff(string(want), b.String()); diff != "" {
			t.Errorf("the statements differ from %s (-golden +sent); review, then rerun with -update:\n%s", g.file, diff)
		}
	}
}

// TestStatementBlocks checks what loading refuses: a block with a bad
// header, a parameter with no field, a field with no parameter.
func TestStatementBlocks(t *testing.T) {
	t.Parallel()
	if _, err := parseBlocks("x.sql", "-- name: Read\nSELECT 1"); err == nil || !strings.Contains(err.Error(), "x.sql:1") {
		t.Errorf("a block without a kind: %v", err)
	}
	if _, err := parseBlocks("x.sql", "-- name: Read :one\n-- only a comment\n"); err == nil {
		t.Error("an empty block was accepted")
	}
	var s stmt[idParams]
	if err := s.load("Read", ":one", "SELECT @id, @other", "s", false); err == nil || !strings.Contains(err.Error(), "@other") {
		t.Errorf("a parameter with no field: %v", err)
	}
	var r stmt[ownerParams]
	if err := r.load("Yield", ":exec", "UPDATE t SET x = 1 WHERE id = @id", "s", false); err == nil || !strings.Contains(err.Error(), "owner_token") {
		t.Errorf("a field with no parameter: %v", err)
	}
	var ok stmt[ownerParams]
	if err := ok.load("Yield", ":exec", "UPDATE {{schema}}.t SET a = @owner_token WHERE id = @id AND b = @owner_token", "s", false); err != nil {
		t.Fatal(err)
	}
	if ok.sql != "UPDATE s.t SET a = $1 WHERE id = $2 AND b = $1" || len(ok.args(&ownerParams{})) != 2 {
		t.Errorf("loaded as %q with %d arguments", ok.sql, len(ok.args(&ownerParams{})))
	}
}
