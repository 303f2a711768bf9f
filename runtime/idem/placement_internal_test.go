package idem

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/dbtest"
)

// TestPlacedStatementsReachOneShard: on Citus with the records laid out by
// placement (make citus's suite-placement round), every statement of a
// request is planned as one task, on the shard of its placement: Citus'
// router sends it, and the phases' writes to the tenant's co-located rows
// with it, to one worker. Elsewhere it checks that each statement names
// the placement beside the id.
func TestPlacedStatementsReachOneShard(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Pool(t)
	typ := dbtest.Placement()
	if typ == "" {
		typ = "bigint"
	}
	dbtest.MigratePlaced(t, pool, schema, typ)
	eng, err := New(pool, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := eng.store.detect(ctx); err != nil {
		t.Fatal(err)
	}
	q := eng.store.q()
	id, place := uuidArg(recordID("ns", "scope", "key")), placementOf("", recordID("ns", "scope", "key"), typ)
	owner := uuidArg(newToken())
	for _, s := range []struct {
		name string
		sql  string
		args []any
	}{
		{"Claim", q.Claim.sql, q.Claim.args(&claimParams{ID: id, Placement: place, OwnerToken: owner, LockTimeout: "1000"})},
		{"ClaimAsync", q.ClaimAsync.sql, q.ClaimAsync.args(&claimParams{ID: id, Placement: place, OwnerToken: owner, LockTimeout: "1000"})},
		{"Read", q.Read.sql, q.Read.args(&idParams{ID: id, Placement: place})},
		{"ClaimRead", q.ClaimRead.sql, q.ClaimRead.args(&claimReadParams{ID: id, Placement: place, StatementTimeout: "1000"})},
		{"Takeover", q.Takeover.sql, q.Takeover.args(&takeoverParams{ID: id, Placement: place, OwnerToken: owner, NewOwner: owner})},
		{"DeleteExpired", q.DeleteExpired.sql, q.DeleteExpired.args(&idParams{ID: id, Placement: place})},
		{"Advance", q.Advance.sql, q.Advance.args(&advanceParams{ID: id, Placement: place, OwnerToken: owner, PhaseState: []byte("{}")})},
		{"Complete", q.Complete.sql, q.Complete.args(&completeParams{ID: id, Placement: place, OwnerToken: owner})},
		{"InsertCompleted", q.InsertCompleted.sql, q.InsertCompleted.args(&insertCompletedParams{ID: id, Placement: place, LockTimeout: "1000"})},
		{"CompleteNatural", q.CompleteNatural.sql, q.CompleteNatural.args(&completeParams{ID: id, Placement: place, OwnerToken: owner, NaturalKey: []byte{1}})},
		{"InsertCompletedNatural", q.InsertCompletedNatural.sql, q.InsertCompletedNatural.args(&insertCompletedParams{ID: id, Placement: place, LockTimeout: "1000", NaturalKey: []byte{1}})},
		{"Release", q.Release.sql, q.Release.args(&releaseParams{ID: id, Placement: place, OwnerToken: owner})},
		{"Yield", q.Yield.sql, q.Yield.args(&ownerParams{ID: id, Placement: place, OwnerToken: owner})},
		{"Refresh", q.Refresh.sql, q.Refresh.args(&refreshParams{ID: id, Placement: place, OwnerToken: owner})},
	} {
		if !strings.Contains(s.sql, "placement") {
			t.Errorf("%s names no placement: %s", s.name, s.sql)
			continue
		}
		if !dbtest.Citus() {
			continue
		}
		rows, err := pool.Query(ctx, "EXPLAIN (COSTS OFF) "+s.sql, s.args...)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
			continue
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if p := strings.Join(plan, "\n"); !strings.Contains(p, "Task Count: 1\n") {
			t.Errorf("%s is not planned on one shard:\n%s", s.name, p)
		}
	}
}
