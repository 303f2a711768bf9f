package idem_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	// A pruner that waited for the held rows would wait for this test.
	waiting, cancel := context.WithTimeout(ctx, 10*time.Second)
	n, err := e.eng.Prune(waiting, 30)
	cancel()
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
