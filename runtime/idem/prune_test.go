package idem_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// seed inserts n completed records; old ones are past retention. They all
// expire at the same instant, as records completed in one microsecond do.
func (e *env) seed(prefix string, n int, old bool) {
	e.t.Helper()
	expires := "now() + interval '1 hour'"
	if old {
		expires = "now() - interval '1 second'"
	}
	e.insertCompleted(prefix, n, expires)
}

// seedSpread inserts n completed records, each expiring a millisecond
// before the previous one: prefix1 is the youngest. Old ones are past
// retention (the youngest by a second), the others expire within the hour.
func (e *env) seedSpread(prefix string, n int, old bool) {
	e.t.Helper()
	youngest := "now() + interval '1 hour'"
	if old {
		youngest = "now() - interval '1 second'"
	}
	e.insertCompleted(prefix, n, youngest+" - g * interval '1 millisecond'")
}

// insertCompleted inserts completed records prefix1 to prefixn, the g-th
// expiring at the SQL expression expires. Unlike the engine's, they keep
// their keys, which the tests count them by.
func (e *env) insertCompleted(prefix string, n int, expires string) {
	e.t.Helper()
	e.exec(`INSERT INTO `+e.schema+`.records (id, namespace, scope, key, fingerprint, expires_at,
    response_status, response_headers, response_body)
SELECT `+e.schema+`.record_id('ns', 't', $1 || g), 'ns', 't', $1 || g, '\x00', `+expires+`, 200, '', ''
FROM generate_series(1, $2) g`, prefix, n)
}

// unfreeable inserts two records past retention (expiring ago) that no
// pruner may delete: "live", whose owner's lease runs, and "half", whose
// lease ran out with a phase committed.
func (e *env) unfreeable(ago string) {
	e.t.Helper()
	e.exec(`INSERT INTO `+e.schema+`.records (id, namespace, scope, key, operation, fingerprint, owner_token, lease_until, expires_at, recovery_point)
SELECT `+e.schema+`.record_id(namespace, scope, key), * FROM (VALUES
    ('ns', 't', 'live', 'op', '\x00'::bytea, gen_random_uuid(), now() + interval '1 minute', now() - $1::interval, ''),
    ('ns', 't', 'half', 'op', '\x00', gen_random_uuid(), now() - interval '1 minute', now() - $1::interval - interval '1 microsecond', 'charge')
) AS r (namespace, scope, key, operation, fingerprint, owner_token, lease_until, expires_at, recovery_point)`, ago)
}

// TestPrune: records past retention go, younger ones stay, claimed records
// with a live lease stay, and claims proceed while the pruner runs.
func TestPrune(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.seedSpread("old-", 5000, true)
	e.seedSpread("young-", 300, false)
	// Amid the old records, two the pruner must keep.
	e.unfreeable("3 seconds")

	var wg sync.WaitGroup
	var pruned int64
	var pruneErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		pruned, pruneErr = idemadmin.Prune(ctx, e.eng, idemadmin.PruneOptions{Batch: 100})
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
	if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE key LIKE 'young-%' OR key IN ('live', 'half')`); n != 302 {
		t.Fatalf("%d young or unfreeable records remain, want 302", n)
	}
}

// TestPruneSkipsLockedBatch: rows held by another pruner's batch (or by a
// claim deleting an expired record) do not stop this pruner, whether they
// lie in the middle of the backlog or fill a batch that expires in one
// instant; what is not freeable stays; and a claim of a key outside the
// held rows is not blocked by them.
func TestPruneSkipsLockedBatch(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	dbtest.NotOnCitus(t, "Citus runs no FOR UPDATE SKIP LOCKED across shards: a pruner there waits pruneLockWait for a held row, and its pass fails for the next to finish (docs/scaling.md)")
	t.Parallel()
	for _, tc := range []struct {
		name string
		seed func(e *env)
	}{
		{"spread", func(e *env) { e.seedSpread("old-", 200, true) }},
		{"one instant", func(e *env) { e.seed("old-", 200, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			tc.seed(e)
			e.seed("young-", 20, false)
			// Among the held rows, two that are not freeable.
			e.unfreeable("1100 milliseconds")
			held, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Rollback(ctx)
			// Another pruner's batch: 50 rows in the middle of the backlog,
			// locked and not yet deleted.
			if _, err := held.Exec(ctx, `SELECT 1 FROM `+e.schema+`.records WHERE key IN (SELECT 'old-' || g FROM generate_series(76, 125) g) FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			// A pruner that waited for the held rows would wait for this test.
			waiting, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := idemadmin.Prune(waiting, e.eng, idemadmin.PruneOptions{Batch: 30})
			cancel()
			if err != nil || n != 150 {
				t.Fatalf("Prune beside a held batch = %d, %v; want the 150 unlocked rows", n, err)
			}
			if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE key LIKE 'young-%' OR key IN ('live', 'half')`); n != 22 {
				t.Fatalf("%d young or unfreeable records remain, want 22", n)
			}
			// A fresh claim while the batch is still held goes through.
			if _, err := idem.Run(ctx, e.eng, payOp, request("t", "fresh", "b"), twoPhases("x")); err != nil {
				t.Fatal(err)
			}
			held.Rollback(ctx)
			if n, err := idemadmin.Prune(ctx, e.eng, idemadmin.PruneOptions{Batch: 30}); err != nil || n != 50 {
				t.Fatalf("second Prune = %d, %v; want 50", n, err)
			}
		})
	}
}

// TestPruneBatches: a batch deletes at most its size, whether the records
// expire one by one, many in one instant, or a few in one instant across
// where one batch's range would end and the next begin.
func TestPruneBatches(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	for _, tc := range []struct {
		name string
		seed func(e *env)
		want int64
	}{
		{"spread and one instant", func(e *env) {
			e.seedSpread("spread-", 1000, true)
			e.seed("instant-", 500, true)
		}, 1500},
		// 150 records, then 60 in one instant (the 151st to the 210th,
		// across the 201st where the second batch would end), then 200.
		{"an instant across a bound", func(e *env) {
			e.insertCompleted("a-", 150, "now() - interval '10 seconds' - g * interval '1 millisecond'")
			e.insertCompleted("tie-", 60, "now() - interval '9 seconds'")
			e.insertCompleted("c-", 200, "now() - interval '1 second' - g * interval '1 millisecond'")
		}, 410},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var batches []int64
			te := idemtest.New(t, idem.Options{Observer: idem.ObserverFunc(func(ev idem.Event) {
				if ev.Kind == idem.EventPruned {
					mu.Lock()
					batches = append(batches, ev.Count)
					mu.Unlock()
				}
			})})
			e := &env{t: t, pool: te.Pool, schema: te.Schema, eng: te.Engine}
			tc.seed(e)
			e.seed("young-", 10, false)
			n, err := idemadmin.Prune(context.Background(), e.eng, idemadmin.PruneOptions{Batch: 100})
			if err != nil || n != tc.want {
				t.Fatalf("Prune = %d, %v; want %d", n, err, tc.want)
			}
			var sum int64
			for _, b := range batches {
				if b > 100 {
					t.Errorf("a batch deleted %d records; the batch size is 100 (batches %v)", b, batches)
				}
				sum += b
			}
			if least := (tc.want + 99) / 100; sum != tc.want || int64(len(batches)) < least {
				t.Fatalf("batches %v: want %d records in at least %d batches", batches, tc.want, least)
			}
		})
	}
}

// TestPruneWithRest: a pruner that rests between batches still deletes
// every freeable record, and a rest that is negative, more than a
// thousand or not a number is refused before anything is deleted.
func TestPruneWithRest(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.seedSpread("old-", 300, true)
	for _, rest := range []float64{-1, math.NaN(), math.Inf(1), 1001} {
		if n, err := idemadmin.Prune(ctx, e.eng, idemadmin.PruneOptions{Batch: 50, Rest: rest}); err == nil || n != 0 {
			t.Fatalf("PruneWith(Rest: %v) = %d, %v; want an error and nothing deleted", rest, n, err)
		}
	}
	if n, err := idemadmin.Prune(ctx, e.eng, idemadmin.PruneOptions{Batch: 50, Rest: 0.5}); err != nil || n != 300 {
		t.Fatalf("PruneWith(Rest: 0.5) = %d, %v; want 300", n, err)
	}
}

// tracedPrune seeds n expired records, prunes them with o on an engine
// whose pool logs its SQL, and returns the log, how many round trips it
// holds, how many pauses its pipelines asked the server for (a SELECT
// among a pipeline's statements: BEGIN, WITH … DELETE, COMMIT), and how
// many pipelines ended with one.
func (e *env) tracedPrune(n int64, o idemadmin.PruneOptions) (log *sqlLog, trips, pauses, endPaused int) {
	e.t.Helper()
	e.seedSpread("old-", int(n), true)
	log = &sqlLog{}
	eng, err := idem.New(tracedPool(e.t, e.pool, log, e.pool.Config().ConnConfig.DefaultQueryExecMode), idem.Options{Schema: e.schema})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := eng.Ready(context.Background()); err != nil { // its one-time query is no prune's
		e.t.Fatal(err)
	}
	log.lines = nil
	if got, err := idemadmin.Prune(context.Background(), eng, o); err != nil || got != n {
		e.t.Fatalf("PruneWith(%+v) = %d, %v; want %d", o, got, err, n)
	}
	lines := strings.Split(log.String(), "\n")
	for i, l := range lines {
		switch {
		case !strings.HasPrefix(l, "  "):
			trips++
		case strings.HasPrefix(l, "  SELECT "):
			pauses++
			if i+1 == len(lines) || !strings.HasPrefix(lines[i+1], "  ") {
				endPaused++
			}
		}
	}
	return log, trips, pauses, endPaused
}

// TestPruneRoundTrips: one round trip finds the ranges of up to ten
// batches and one deletes them, each batch in a transaction of its own,
// so small batches do not slow the pruner by a round trip each.
func TestPruneRoundTrips(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	log, trips, _, _ := newEnv(t).tracedPrune(1000, idemadmin.PruneOptions{Batch: 100})
	// Ten batches: the ranges of nine and their deletes (the walk stops
	// at the last record, a batch short of a tenth range), the last
	// batch's start and the batch (no upper bound), the walk that finds
	// nothing left, and the count of stuck records.
	if trips > 6 {
		t.Errorf("Prune of ten batches took %d round trips, want at most 6:\n%s", trips, log)
	}
}

// TestPruneRestsInTheServer: a pruner that rests pauses between the
// batches of a round trip in the server (the pipeline's SELECT pg_sleep
// after a batch's COMMIT), so that the database's work comes in bursts of
// a batch or two, and its pauses add no round trip.
func TestPruneRestsInTheServer(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	log, trips, pauses, endPaused := newEnv(t).tracedPrune(3000, idemadmin.PruneOptions{Batch: 100, Rest: 1})
	// Thirty batches: three walks and their deletes (the third a batch
	// short of ten ranges), the last batch's walk and its batch, the walk
	// that finds nothing left, the stuck count. The first trip has no
	// batch's time to rest by; the later ones do.
	if pauses == 0 || trips > 10 {
		t.Errorf("Prune of thirty batches resting 1 took %d round trips and paused %d times in them; want at most 10 and some pauses:\n%s", trips, pauses, log)
	}
	// The rest after a trip's last batch is taken without the connection.
	if endPaused > 0 {
		t.Errorf("%d round trips ended with a pause in the server; want none:\n%s", endPaused, log)
	}
}
