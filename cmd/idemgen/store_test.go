package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
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
		{append([]string{"migrate"}, append(db, "up")...), 0, "applied [1 2 3 4 5 6 7 8]; now at version 8"},
		{append([]string{"migrate"}, append(db, "up")...), 0, "applied []; now at version 8"},
		{append([]string{"inspect"}, append(db, "-operation", "op", "-key", "k")...), 1, `no record for operation "op"`},
		{append([]string{"prune"}, db...), 0, "pruned 0 records"},
		{append([]string{"prune"}, append(db, "-rest", "1")...), 0, "pruned 0 records"},
		{append([]string{"prune"}, append(db, "-rest", "-1")...), 1, "-rest -1: want 0 or more"},
		{append([]string{"abandoned"}, append(db, "-stuck")...), 0, "0 abandoned claim(s)"},
		{append([]string{"reconcile"}, append(db, "-since", "24h")...), 0, "0 natural key(s) completed under more than one idempotency key since"},
		{append([]string{"reconcile"}, db...), 1, "-since is required"},
		{append([]string{"reconcile"}, append(db, "-since", "2999-01-01T00:00:00Z")...), 1, "is in the future"},
		{append([]string{"reconcile"}, append(db, "-since", "yesterday")...), 1, "want a time (RFC 3339"},
		{append([]string{"resolve"}, append(db, "-operation", "op", "-key", "k")...), 2, "Nothing happens without -delete or -complete"},
		{append([]string{"resolve"}, append(db, "-operation", "op", "-key", "k", "-delete", "-complete")...), 2, "usage: idemgen resolve"},
		{append([]string{"resolve"}, append(db, "-operation", "op", "-key", "k", "-delete")...), 1, `no record for operation "op"`},
		{append([]string{"migrate"}, append(db, "down", "0")...), 0, "reverted [8 7 6 5 4 3 2 1]; now at version 0"},
		{[]string{"migrate", "-schema", "cli", "-format", "goose", "sql"}, 0, "-- +goose Up\nCREATE SCHEMA IF NOT EXISTS cli;"},
		{[]string{"migrate", "-database", "", "up"}, 1, "no database"},
		{[]string{"migrate", "sideways"}, 2, "usage: idemgen migrate"},
		{[]string{"inspect", "-key", "k"}, 2, "-operation and -key are required"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	distribute := []string{"migrate", "-database", idemtest.URL(t), "-schema", "cli", "distribute"}
	place := func(args ...string) []string {
		return append(distribute[:len(distribute)-1:len(distribute)-1], args...)
	}
	steps = append(steps, struct {
		args []string
		code int
		want string
	}{place("place"), 1, "migrate place: say the table to co-locate the records with: -colocate-with TABLE"})
	if dbtest.Citus() {
		// On a Citus coordinator every operator command runs on the
		// distributed table, and the migrations revert it.
		steps = slices.Insert(steps, 2, []struct {
			args []string
			code int
			want string
		}{
			{distribute, 0, "schema cli: records table now distributed by id; restart the services on it"},
			{distribute, 0, "schema cli: records table already distributed by id"},
			{place("-colocate-with", "accounts", "place"), 1, "accounts is not a hash-distributed table: distribute the service's table first"},
		}...)
	} else {
		steps = slices.Insert(steps, 2, []struct {
			args []string
			code int
			want string
		}{
			{distribute, 1, "the Citus extension is not installed"},
			{append(distribute[:len(distribute)-1:len(distribute)-1], "-colocate-with", "accounts", "distribute"), 1, "the Citus extension is not installed"},
			{place("-colocate-with", "accounts", "place"), 1, "the Citus extension is not installed"},
		}...)
	}
	for _, s := range steps {
		code, out, errs := runCLI(t, s.args...)
		if code != s.code || !strings.Contains(out+errs, s.want) {
			t.Errorf("idemgen %s: exit %d, output %q%q; want exit %d containing %q", strings.Join(s.args, " "), code, out, errs, s.code, s.want)
		}
	}
}

// TestOperatorCommandsTakeAnOperationID: inspect and resolve find a grouped
// operation's records by its operationId with -spec, and without it say
// which group to name.
func TestOperatorCommandsTakeAnOperationID(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	ctx := context.Background()
	op := &idem.Operation{ID: "PostCharges", Namespace: "charges"}
	sum := sha256.Sum256([]byte("{}"))
	req := idem.KeyedRequest{Scope: "acct", Key: "k", Fingerprint: sum[:]}
	if _, err := idem.Run(ctx, env.Engine, op, req, []idem.Phase[struct{}]{{Name: "finish", Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
		return &idem.Response{Status: 201}, nil
	}}}); err != nil {
		t.Fatal(err)
	}
	// One left in progress: its claim committed, its execution gone.
	held := req
	held.Key = "held"
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, env.Engine, op, held, []idem.Phase[struct{}]{
			{Name: "call", Foreign: func(context.Context, string, *struct{}) error { runtime.Goexit(); return nil }},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) { return nil, nil }},
		})
	}()
	<-done
	if _, err := env.Pool.Exec(ctx, `UPDATE records SET lease_until = now() - interval '1 second' WHERE owner_token IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"api.yaml": `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /v1/charges:
    post:
      operationId: PostCharges
      x-idempotency: {group: charges}
      responses: {"201": {description: created}}
`})
	db := []string{"-database", idemtest.URL(t), "-schema", env.Schema}
	for _, s := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "-operation", "charges", "-scope", "acct", "-key", "k"}, 0, `"state": "completed"`},
		{[]string{"inspect", "-operation", "PostCharges", "-scope", "acct", "-key", "k", "-spec", filepath.Join(dir, "api.yaml")}, 0, `"state": "completed"`},
		{[]string{"inspect", "-operation", "PostCharges", "-scope", "acct", "-key", "k"}, 1, `records of operation PostCharges are under its group "charges": name it, -operation charges, or pass -spec`},
		{[]string{"inspect", "-operation", "Nope", "-scope", "acct", "-key", "k"}, 1, `if Nope is in an x-idempotency group, name the group`},
		{[]string{"inspect", "-operation", "Nope", "-key", "k", "-spec", filepath.Join(dir, "api.yaml")}, 1, `no operation "Nope" with x-idempotency`},
		{[]string{"abandoned", "-operation", "PostCharges"}, 0, `"key":"held"`},
		{[]string{"abandoned", "-operation", "PostCharges", "-spec", filepath.Join(dir, "api.yaml")}, 0, `"namespace":"charges"`},
		{[]string{"abandoned", "-operation", "Other"}, 0, "0 abandoned claim(s)"},
		{[]string{"resolve", "-operation", "PostCharges", "-scope", "acct", "-key", "held", "-delete", "-spec", filepath.Join(dir, "api.yaml")}, 0, `deleted the record of charges key "held"`},
	} {
		code, out, errs := runCLI(t, append(s.args, db...)...)
		if code != s.code || !strings.Contains(out+errs, s.want) {
			t.Errorf("idemgen %s: exit %d, output %q%q; want exit %d containing %q", strings.Join(s.args, " "), code, out, errs, s.code, s.want)
		}
	}
}

// TestAbandonedFiltersBeforeItLimits: `abandoned -operation X -limit N`
// lists X's abandoned claims even when more than N of other operations
// are older: the filter is the query's, not a pass over its first N rows.
func TestAbandonedFiltersBeforeItLimits(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	ctx := context.Background()
	sum := sha256.Sum256([]byte("{}"))
	abandon := func(op, key string) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, env.Engine, &idem.Operation{ID: op}, idem.KeyedRequest{Scope: "acct", Key: key, Fingerprint: sum[:]}, []idem.Phase[struct{}]{
				{Name: "call", Foreign: func(context.Context, string, *struct{}) error { runtime.Goexit(); return nil }},
				{Name: "finish", Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) { return nil, nil }},
			})
		}()
		<-done
	}
	for _, k := range []string{"a1", "a2", "a3"} {
		abandon("Other", k)
	}
	abandon("Mine", "m1")
	// The other operation's leases ran out first.
	if _, err := env.Pool.Exec(ctx, `UPDATE records SET lease_until = now() - CASE WHEN operation = 'Other' THEN interval '1 hour' ELSE interval '1 second' END
WHERE owner_token IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "abandoned", "-database", idemtest.URL(t), "-schema", env.Schema, "-operation", "Mine", "-limit", "2")
	if code != 0 || !strings.Contains(out, `"key":"m1"`) || !strings.Contains(errs, "1 abandoned claim(s)") {
		t.Errorf("abandoned -operation Mine -limit 2: exit %d, output %q%q; want Mine's one claim", code, out, errs)
	}
}
