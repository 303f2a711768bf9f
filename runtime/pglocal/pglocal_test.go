package pglocal

import (
	"context"
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
