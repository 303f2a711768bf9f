package pglocal

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartQueryRestartStop runs a whole cluster life: it must answer
// queries, survive a restart with its data, and leave no files behind.
func TestStartQueryRestartStop(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, Options{TCPPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, "postgres://postgres@"+c.TCPAddr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after restart: v=%d err=%v", v, err)
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5/old?sslmode=disable": "postgres://u:p@h:5/new?sslmode=disable",
		"postgres://u@h":                         "postgres://u@h/new",
		"host=/tmp port=5":                       "host=/tmp port=5 dbname=new",
	} {
		if got := withDatabase(in, "new"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenChecksDatabaseURLFirst: a DATABASE_URL that cannot be used is
// reported as such, naming the variable, before anything connects with it.
func TestOpenChecksDatabaseURLFirst(t *testing.T) {
	for _, bad := range []string{
		"postgres://u:secret@localhost:5432/db?sslmode=bogus", // pgx rejects it
		"   ", // blank: pgx would connect to its defaults (local socket, OS user)
	} {
		t.Setenv("DATABASE_URL", bad)
		env, err := Open(context.Background(), "badurl", Options{})
		if err == nil {
			env.Close()
			t.Errorf("DATABASE_URL=%q: Open succeeded", bad)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "pglocal: DATABASE_URL ") || strings.Contains(msg, "creating database") ||
			strings.Contains(msg, "dial") || strings.Contains(msg, "secret") {
			t.Errorf("DATABASE_URL=%q: %v\nwant an error that names the variable, before any connection, without the password", bad, err)
		}
	}
}
