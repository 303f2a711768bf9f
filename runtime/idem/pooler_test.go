package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// sessionSettings are the settings the engine changes, transaction-locally.
var sessionSettings = []string{"lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout", "synchronous_commit"}

func settings(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var out string
	for _, name := range sessionSettings {
		var v string
		if err := pool.QueryRow(context.Background(), `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		out += name + "=" + v + " "
	}
	return out
}

// TestNoSessionStateLeft: a transaction pooler (PgBouncer in transaction
// mode) gives each transaction whichever server connection is free, so the
// engine must leave nothing on a connection beyond its transaction. On a
// pool of one connection, every path that changes a setting (the inline
// claim and its conflicts, a separate claim with AsyncClaimCommit, a first
// phase that is foreign, a failed phase) leaves the connection's settings
// as they were.
func TestNoSessionStateLeft(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	e := newEnv(t)
	cfg := e.pool.Config()
	cfg.MaxConns = 1
	if !dbtest.Pooled() {
		// The throwaway cluster runs with synchronous_commit off; on, a
		// leaked AsyncClaimCommit would show. (Through a pooler the
		// connection's startup parameters cannot be set.)
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	before := settings(t, pool)
	eng, err := idem.New(pool, idem.Options{Schema: e.schema, AsyncClaimCommit: true, ClaimWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	separate := &idem.Operation{ID: "separate", Policy: idem.Policy{Lease: 5 * time.Second, Claim: idem.ClaimSeparate}}
	inlineOp := &idem.Operation{ID: "inline", Policy: idem.Policy{Lease: 5 * time.Second, Claim: idem.ClaimFirst}}
	foreignFirst := []idem.Phase[payState]{
		{Name: "charge", Foreign: func(context.Context, string, *payState) error { return nil }},
		twoPhases("ff")[1],
	}
	failing := twoPhases("fail")
	failing[0].Local = func(context.Context, pgx.Tx, *payState) error { return idem.Release(errors.New("refused")) }
	for i, r := range []struct {
		op      *idem.Operation
		key     string
		phases  []idem.Phase[payState]
		refused bool
	}{
		{inlineOp, "k1", twoPhases("k1"), false},
		{inlineOp, "k1", twoPhases("k1"), false}, // conflict: replay
		{lastOp, "k5", twoPhases("k5"), false},
		{lastOp, "k5", twoPhases("k5"), false}, // conflict: replay
		{separate, "k2", twoPhases("k2"), false},
		{inlineOp, "k3", foreignFirst, false},
		{inlineOp, "k4", failing, true},
	} {
		if _, err := idem.Run(ctx, eng, r.op, request("t", r.key, "b"), r.phases); (err != nil) != r.refused {
			t.Fatalf("run %d: %v", i, err)
		}
		if after := settings(t, pool); after != before {
			t.Fatalf("run %d left session state behind:\nbefore %s\nafter  %s", i, before, after)
		}
	}
	// The pruner's range batches set synchronous_commit and lock_timeout
	// for their own transaction only.
	e.seedSpread("old-", 120, true)
	if n, err := idemadmin.Prune(ctx, eng, idemadmin.PruneOptions{Batch: 50}); err != nil || n != 120 {
		t.Fatalf("Prune = %d, %v; want 120", n, err)
	}
	if after := settings(t, pool); after != before {
		t.Fatalf("Prune left session state behind:\nbefore %s\nafter  %s", before, after)
	}
}
