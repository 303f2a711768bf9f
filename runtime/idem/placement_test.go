package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// placed is req placed by tenant.
func placed(req idem.KeyedRequest, tenant string) idem.KeyedRequest {
	req.Placement = tenant
	return req
}

// TestPlacementPlacesRecords: on a records table laid out by placement
// (idemmigrate's DistributeBy), in every claim mode, a request's record
// keeps its operation's placement (a tenant) in clear; concurrent
// duplicates of one placed key execute once; a retry replays; the same key
// under another placement is another record (keys are unique per
// placement); an operation that declares no placement is placed by its
// record's id; a crashed execution is taken over, and an abandoned
// background one completed, at its placement.
func TestPlacementPlacesRecords(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnvPlaced(t, m, idem.Options{}, "bigint")
			ctx := context.Background()
			placements := func() []string {
				rows, err := e.pool.Query(ctx, `SELECT placement::text FROM `+e.schema+`.records ORDER BY placement`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				var out []string
				for rows.Next() {
					var p string
					if err := rows.Scan(&p); err != nil {
						t.Fatal(err)
					}
					out = append(out, p)
				}
				return out
			}
			// Concurrent duplicates of one placed key.
			var wg sync.WaitGroup
			var mu sync.Mutex
			executed := 0
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := idem.Run(ctx, e.eng, payOp, placed(request("t", "k", "b"), "42"), twoPhases("k"))
					if err != nil && !errors.As(err, new(*idem.Error)) {
						t.Errorf("duplicate: %v", err)
					}
					mu.Lock()
					defer mu.Unlock()
					if err == nil && !out.Replayed {
						executed++
					}
				}()
			}
			wg.Wait()
			if executed != 1 || e.count(`SELECT count(*) FROM rows WHERE key = 'k'`) != 1 {
				t.Fatalf("16 duplicates of one placed key: %d executions, %d rows; want 1, 1", executed, e.count(`SELECT count(*) FROM rows WHERE key = 'k'`))
			}
			if got := placements(); len(got) != 1 || got[0] != "42" {
				t.Fatalf("placements %v; want [42]", got)
			}
			if out, err := idem.Run(ctx, e.eng, payOp, placed(request("t", "k", "b"), "42"), twoPhases("k")); err != nil || !out.Replayed {
				t.Fatalf("a retry: %+v, %v; want the replay", out, err)
			}
			// The same key under another placement: another record.
			if out, err := idem.Run(ctx, e.eng, payOp, placed(request("t", "k", "b"), "43"), twoPhases("k")); err != nil || out.Replayed {
				t.Fatalf("the key under placement 43: %+v, %v; want an execution of its own", out, err)
			}
			// No placement: placed by the record's id.
			if out, err := idem.Run(ctx, e.eng, payOp, request("t", "free", "b"), twoPhases("free")); err != nil || out.Replayed {
				t.Fatalf("no placement: %+v, %v", out, err)
			}
			if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE placement NOT IN (42, 43)`); n != 1 {
				t.Errorf("%d records placed by id; want 1", n)
			}
			// A crashed execution, taken over at its placement.
			crash := errors.New("crash")
			phases := committedFirst(twoPhases("c"))
			phases[1].Local = func(context.Context, pgx.Tx, *payState) error { return crash }
			if _, err := idem.Run(ctx, e.eng, payOp, placed(request("t", "c", "b"), "7"), phases); err == nil {
				t.Fatal("the crashing phase succeeded")
			}
			e.expireLeases()
			if out, err := idem.Run(ctx, e.eng, payOp, placed(request("t", "c", "b"), "7"), committedFirst(twoPhases("c"))); err != nil || out.Replayed {
				t.Fatalf("the retry after a crash: %+v, %v; want it resumed", out, err)
			}
			// An abandoned background execution, completed at its placement.
			bg := &idem.Operation{ID: "bg", Policy: idem.Policy{Lease: time.Second, Complete: "background"}}
			idem.RegisterCompleter(e.eng, bg, func([]byte) ([]idem.Phase[payState], error) { return committedFirst(twoPhases("bg")), nil })
			failing := committedFirst(twoPhases("bg"))
			failing[1].Local = func(context.Context, pgx.Tx, *payState) error { return crash }
			if _, err := idem.Run(ctx, e.eng, bg, placed(request("t", "bg", "b"), "9"), failing); err == nil {
				t.Fatal("the background operation's crashing phase succeeded")
			}
			e.expireLeases()
			if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 1 || err != nil {
				t.Fatalf("the completer: %d, %v; want the record placed at 9 completed", n, err)
			}
			if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE placement = 9 AND owner_token IS NULL`); n != 1 {
				t.Errorf("%d completed records at 9; want 1", n)
			}
			if info, err := idemadmin.Inspect(ctx, e.eng, payOp.ID, "t", "k"); err != nil || info.State != "completed" {
				t.Errorf("Inspect of a placed key: %+v, %v", info, err)
			}
		})
	}
}
