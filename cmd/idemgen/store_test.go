package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idemtest"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestStoreCommands(t *testing.T) {
	db := []string{"-database", idemtest.URL(t), "-schema", "cli"}
	steps := []struct {
		args []string
		code int
		want string
	}{
		{append([]string{"migrate"}, append(db, "up")...), 0, "applied [1 2 3 4 5]; now at version 5"},
		{append([]string{"migrate"}, append(db, "up")...), 0, "applied []; now at version 5"},
		{append([]string{"inspect"}, append(db, "-operation", "op", "-key", "k")...), 1, `no record for operation "op"`},
		{append([]string{"prune"}, db...), 0, "pruned 0 records"},
		{append([]string{"prune"}, append(db, "-rest", "1")...), 0, "pruned 0 records"},
		{append([]string{"prune"}, append(db, "-rest", "-1")...), 1, "-rest -1: want 0 or more"},
		{append([]string{"abandoned"}, append(db, "-stuck")...), 0, "0 abandoned claim(s)"},
		{append([]string{"resolve"}, append(db, "-operation", "op", "-key", "k")...), 2, "Nothing happens without -delete or -complete"},
		{append([]string{"resolve"}, append(db, "-operation", "op", "-key", "k", "-delete", "-complete")...), 2, "usage: idemgen resolve"},
		{append([]string{"resolve"}, append(db, "-operation", "op", "-key", "k", "-delete")...), 1, `no record for operation "op"`},
		{append([]string{"migrate"}, append(db, "down", "0")...), 0, "reverted [5 4 3 2 1]; now at version 0"},
		{[]string{"migrate", "-schema", "cli", "-format", "goose", "sql"}, 0, "-- +goose Up\nCREATE SCHEMA IF NOT EXISTS cli;"},
		{[]string{"migrate", "-database", "", "up"}, 1, "no database"},
		{[]string{"migrate", "sideways"}, 2, "usage: idemgen migrate"},
		{[]string{"inspect", "-key", "k"}, 2, "-operation and -key are required"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	for _, s := range steps {
		code, out, errs := runCLI(t, s.args...)
		if code != s.code || !strings.Contains(out+errs, s.want) {
			t.Errorf("idemgen %s: exit %d, output %q%q; want exit %d containing %q", strings.Join(s.args, " "), code, out, errs, s.code, s.want)
		}
	}
}
