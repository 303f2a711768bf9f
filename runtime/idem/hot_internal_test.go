package idem

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestRefreshIsHOT: a lease refresh changes no indexed column, so
// PostgreSQL updates the row in place (a heap-only tuple) and writes no
// index entry. Every running execution refreshes every lease/3; with an
// index on lease_until each refresh would add an entry to every index of
// the table.
func TestRefreshIsHOT(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	dbtest.NotOnCitus(t, "heap-only updates happen in the shards, on the workers, whose statistics the coordinator's pg_stat_user_tables does not show")
	t.Parallel()
	r := newRaceEnv(t)
	ctx := context.Background()
	var claims []*claim
	// A background operation too: its claims are the ones an index for the
	// completer covers.
	for _, bg := range []idemtype.Complete{idemtype.CompleteOnRetry, idemtype.CompleteBackground} {
		op := &Operation{ID: "op-" + string(bg), Policy: Policy{Lease: 30 * time.Second, Claim: ClaimSeparate, Complete: bg}}
		claims = append(claims, r.claimed(op, raceReq("k")))
	}
	const rounds = 3
	// The transaction's own counters are exact and need no wait for the
	// statistics collector.
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		for range rounds {
			for _, c := range claims {
				q := &r.eng.store.q().Refresh
				tag, err := tx.Exec(ctx, q.sql, q.args(&refreshParams{ID: uuidArg(c.id), OwnerToken: uuidArg(c.token), LeaseUS: micros(c.policy.Lease)})...)
				if err != nil {
					return err
				}
				if tag.RowsAffected() != 1 {
					t.Fatal("the refresh matched no record")
				}
			}
		}
		var updated, hot int
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)
FROM pg_class c WHERE c.oid = $1::regclass`, r.schema+".records").Scan(&updated, &hot); err != nil {
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

// claimed claims req for op on r's engine and returns the claim, committed
// when op's policy claims separately.
func (r *raceEnv) claimed(op *Operation, req KeyedRequest) *claim {
	r.t.Helper()
	p, err := r.eng.policy(op)
	if err != nil {
		r.t.Fatal(err)
	}
	c, out, err := r.eng.acquire(context.Background(), op, p, separateClaim{}, req, false)
	if err != nil || out != nil {
		r.t.Fatalf("claim: %v %v", out, err)
	}
	return c
}
