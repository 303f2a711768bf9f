package idem

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/dbtest"
)

// TestRefreshIsHOT: a lease refresh changes no indexed column, so
// PostgreSQL updates the row in place (a heap-only tuple) and writes no
// index entry. Every running execution refreshes every lease/3; with an
// index on lease_until each refresh would add an entry to every index of
// the table.
func TestRefreshIsHOT(t *testing.T) {
	pool, schema := dbtest.Pool(t)
	ctx := context.Background()
	if _, err := Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	e, err := New(pool, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	fp := sha256.Sum256([]byte("body"))
	var claims []*claim
	// A background operation too: its claims are the ones an index for the
	// completer covers.
	for _, bg := range []Complete{CompleteOnRetry, CompleteBackground} {
		op := &Operation{ID: "op-" + string(bg), Policy: Policy{Lease: 30 * time.Second, SeparateClaim: true, Complete: bg}}
		p, err := e.policy(op)
		if err != nil {
			t.Fatal(err)
		}
		c, out, err := e.claim(ctx, op, p, Request{Scope: "s", Key: "k", Fingerprint: fp[:], Payload: []byte(`{}`)})
		if err != nil || out != nil {
			t.Fatalf("claim: %v %v", out, err)
		}
		claims = append(claims, c)
	}
	const rounds = 3
	// The transaction's own counters are exact and need no wait for the
	// statistics collector.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for range rounds {
			for _, c := range claims {
				ok, err := e.q.refresh(ctx, tx, c)
				if err != nil {
					return err
				}
				if !ok {
					t.Fatal("the refresh matched no record")
				}
			}
		}
		var updated, hot int
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)
FROM pg_class c WHERE c.oid = $1::regclass`, schema+".records").Scan(&updated, &hot); err != nil {
			return err
		}
		if want := rounds * len(claims); updated != want || hot != want {
			t.Fatalf("%d refreshes: %d updates, %d of them HOT; want every one HOT", want, updated, hot)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
