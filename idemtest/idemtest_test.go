package idemtest_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// TestNewIsolates: each New has its own schema with the engine's tables,
// and its pool is closed by the test's cleanup.
func TestNewIsolates(t *testing.T) {
	var first *idemtest.Env
	t.Run("first", func(t *testing.T) {
		first = idemtest.New(t, idem.Options{})
		if err := first.Pool.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	if err := first.Pool.Ping(context.Background()); err == nil {
		t.Error("the pool is still open after its test ended")
	}
	second := idemtest.New(t, idem.Options{Schema: "ignored"})
	if second.Schema == first.Schema || second.Schema == "ignored" {
		t.Fatalf("schemas %q and %q; want two new ones", first.Schema, second.Schema)
	}
	var n int
	err := second.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'records'`, second.Schema).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("records tables in %s: %d, %v; want 1", second.Schema, n, err)
	}
}
