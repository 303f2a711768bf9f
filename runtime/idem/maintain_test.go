package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/dbtest"

	"github.com/idemgen/idemgen/runtime/idem"
)

// seed inserts n completed records; old ones are past retention.
func (e *env) seed(prefix string, n int, old bool) {
	e.t.Helper()
	expires := "now() + interval '1 hour'"
	if old {
		expires = "now() - interval '1 second'"
	}
	e.exec(`INSERT INTO `+e.schema+`.records (namespace, scope, key, operation, fingerprint, state, expires_at,
    response_status, response_headers, response_body)
SELECT 'ns', 't', $1 || g, 'op', '\x00', 'completed', `+expires+`, 200, '{}', ''
FROM generate_series(1, $2) g`, prefix, n)
}

// TestPrune: records past retention go, younger ones stay, claimed records
// with a live lease stay, and claims proceed while the pruner runs.
func TestPrune(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed("old-", 5000, true)
	e.seed("young-", 300, false)
	// An old record whose owner is still live must not be pruned.
	e.exec(`INSERT INTO ` + e.schema + `.records (namespace, scope, key, operation, fingerprint, state, owner_token, lease_until, expires_at)
VALUES ('ns', 't', 'live', 'op', '\x00', 'claimed', gen_random_uuid(), now() + interval '1 minute', now() - interval '1 second')`)

	var wg sync.WaitGroup
	var pruned int64
	var pruneErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		pruned, pruneErr = e.eng.Prune(ctx, 100)
	}()
	// Claims of fresh keys run concurrently with the pruner's batches.
	for i := 0; i < 50; i++ {
		if _, err := idem.Run(ctx, e.eng, payOp, request("t", fmt.Sprintf("during-%d", i), "b"), twoPhases("x")); err != nil {
			t.Fatalf("claim during prune: %v", err)
		}
	}
	wg.Wait()
	if pruneErr != nil || pruned != 5000 {
		t.Fatalf("Prune = %d, %v; want 5000", pruned, pruneErr)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE key LIKE 'old-%'`); n != 0 {
		t.Fatalf("%d old records remain", n)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE key LIKE 'young-%' OR key = 'live'`); n != 301 {
		t.Fatalf("%d young or live records remain, want 301", n)
	}
}

// TestPruneSkipsLockedBatch: a batch held by another pruner (or a claim
// waiting on one of its keys) does not stop this pruner, and a claim of a
// key outside the held batch is not blocked by it.
func TestPruneSkipsLockedBatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed("old-", 200, true)
	held, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx)
	// Another pruner's batch: the first 50 rows, locked and not yet deleted.
	if _, err := held.Exec(ctx, `SELECT 1 FROM `+e.schema+`.records WHERE key IN (SELECT 'old-' || g FROM generate_series(1, 50) g) FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	n, err := e.eng.Prune(ctx, 30)
	if err != nil || n != 150 {
		t.Fatalf("Prune beside a held batch = %d, %v; want the 150 unlocked rows", n, err)
	}
	// A fresh claim while the batch is still held goes through.
	if _, err := idem.Run(ctx, e.eng, payOp, request("t", "fresh", "b"), twoPhases("x")); err != nil {
		t.Fatal(err)
	}
	held.Rollback(ctx)
	if n, err := e.eng.Prune(ctx, 30); err != nil || n != 50 {
		t.Fatalf("second Prune = %d, %v; want 50", n, err)
	}
}

func TestMigrate(t *testing.T) {
	pool, schema := dbtest.Pool(t)
	ctx := context.Background()
	// Four processes starting at once all migrate; exactly one applies.
	var wg sync.WaitGroup
	applied := make([][]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = idem.Migrate(ctx, pool, schema)
		}()
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += len(applied[i])
	}
	all, _ := idem.Migrations(schema)
	if total != len(all) {
		t.Fatalf("applied %d migrations in all, want %d once", total, len(all))
	}
	if v, err := idem.AppliedVersion(ctx, pool, schema); err != nil || v != all[len(all)-1].Version {
		t.Fatalf("AppliedVersion = %d, %v", v, err)
	}
	if _, err := idem.MigrateDown(ctx, pool, schema, 0); err != nil {
		t.Fatal(err)
	}
	var exists bool
	pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".records").Scan(&exists)
	if exists {
		t.Fatal("records table survived MigrateDown(0)")
	}
	if got, err := idem.Migrate(ctx, pool, schema); err != nil || len(got) != len(all) {
		t.Fatalf("re-Migrate = %v, %v", got, err)
	}
	if _, err := idem.Migrate(ctx, pool, "Bad-Name"); err == nil {
		t.Fatal("an invalid schema name was accepted")
	}
	if _, err := idem.New(pool, idem.Options{Schema: "x; DROP TABLE y"}); err == nil {
		t.Fatal("New accepted an invalid schema name")
	}
}

func TestInspect(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), twoPhases("k")); err != nil {
		t.Fatal(err)
	}
	info, err := e.eng.Inspect(ctx, "createPayment", "t", "k")
	if err != nil || info.State != "completed" || info.RecoveryPoint != "finish" || info.Status == nil || *info.Status != 201 {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if _, err := e.eng.Inspect(ctx, "createPayment", "t", "absent"); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("Inspect of an absent key: %v", err)
	}
}
