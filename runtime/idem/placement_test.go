package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
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

// TestPlacementMove moves a running deployment from the id layout to
// placement by tenant (idemmigrate's PreparePlacement, then DistributeBy;
// docs/scaling.md, "Moving a running deployment"), in every claim mode:
// with a completed key, a claim in flight from before the move and one
// from during it, and retries across each step. No key executes twice: a
// retry after PreparePlacement (an engine restarted on the recording
// table) replays what the old layout completed; the switch is refused
// while a record has no placement; an engine left on the recording
// statements finishes its execution in flight across the switch; and an
// engine started after it replays every placed key.
func TestPlacementMove(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, schema := dbtest.PoolWith(t, func(c *pgxpool.Config) {
				c.ConnConfig.DefaultQueryExecMode = m.exec
				c.MaxConns = 8
			})
			mig := idemmigrate.New(pool, schema)
			if _, err := mig.Up(ctx); err != nil {
				t.Fatal(err)
			}
			target := idemmigrate.DistributeOptions{PlacementType: "bigint"}
			if dbtest.Citus() {
				target = idemmigrate.DistributeOptions{ColocateWith: schema + ".tenants"}
				for _, q := range []string{
					`CREATE TABLE ` + schema + `.tenants (tenant bigint PRIMARY KEY)`,
					`SELECT create_distributed_table('` + schema + `.tenants', 'tenant')`,
				} {
					if _, err := pool.Exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := mig.Distribute(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pool.Exec(ctx, `CREATE TABLE rows (key text NOT NULL, note text NOT NULL DEFAULT '')`); err != nil {
				t.Fatal(err)
			}
			e := &env{t: t, pool: pool, schema: schema, ev: &events{n: map[idem.EventKind]int{}}, mode: m}
			rows := func(key string) int { return e.count(`SELECT count(*) FROM rows WHERE key = $1`, key) }
			// held runs key's phases on eng, placed at 42, holding them in a
			// foreign phase (its claim committed) until release is closed.
			held := func(eng *idem.Engine, key string) (release chan struct{}, done chan error) {
				release, done, started := make(chan struct{}), make(chan error, 1), make(chan struct{})
				phases := append([]idem.Phase[payState]{{Name: "wait", Foreign: func(context.Context, string, *payState) error {
					close(started)
					<-release
					return nil
				}}}, twoPhases(key)...)
				go func() {
					_, err := idem.Run(ctx, eng, payOp, placed(request("t", key, "b"), "42"), phases)
					done <- err
				}()
				<-started
				return release, done
			}
			run := func(eng *idem.Engine, key string, replay bool) {
				t.Helper()
				out, err := idem.Run(ctx, eng, payOp, placed(request("t", key, "b"), "42"), twoPhases(key))
				if err != nil || out.Replayed != replay {
					t.Fatalf("%s: %+v, %v; want replayed %t", key, out, err, replay)
				}
				if n := rows(key); n != 1 {
					t.Fatalf("%s executed %d times; want once", key, n)
				}
			}

			// Before the move: the id layout.
			old := mustEngineWith(t, e, idem.Options{})
			run(old, "done", false)
			release1, done1 := held(old, "flight")

			// Step 1: the placement column; the services restarted.
			if added, err := mig.PreparePlacement(ctx, target); err != nil || !added {
				t.Fatalf("PreparePlacement: %t, %v", added, err)
			}
			recording := mustEngineWith(t, e, idem.Options{})
			run(recording, "done", true) // found by id, made before the column
			run(recording, "new", false)
			if n := e.count(`SELECT count(*) FROM ` + schema + `.records WHERE placement = 42`); n != 1 {
				t.Fatalf("%d records placed at 42 after a recording engine's claim; want 1", n)
			}
			close(release1) // the old engine's execution completes
			if err := <-done1; err != nil {
				t.Fatalf("the execution in flight before the move: %v", err)
			}
			run(recording, "flight", true)
			release2, done2 := held(recording, "across")

			// Step 2 is refused while records of before the move remain.
			if _, err := mig.DistributeBy(ctx, target); !errors.Is(err, idemmigrate.ErrUnplaced) || !strings.Contains(err.Error(), "2 records") {
				t.Fatalf("DistributeBy with 2 records of before the move: %v; want ErrUnplaced saying 2 records", err)
			}
			// Their retention passes, and they are pruned.
			e.exec(`UPDATE ` + schema + `.records SET expires_at = now() - interval '1 second' WHERE placement IS NULL`)
			if n, err := idemadmin.Prune(ctx, recording, idemadmin.PruneOptions{}); err != nil || n != 2 {
				t.Fatalf("prune: %d, %v; want the 2 records of before the move", n, err)
			}
			if dbtest.Citus() && m.claim == idem.ClaimFirst {
				// A switch cut short on Citus: the key made, the table
				// still distributed by id. DistributeBy finishes it.
				e.exec(`ALTER TABLE ` + schema + `.records ALTER COLUMN placement SET NOT NULL`)
				e.exec(`ALTER TABLE ` + schema + `.records DROP CONSTRAINT records_pkey`)
				e.exec(`ALTER TABLE ` + schema + `.records ADD CONSTRAINT records_pkey PRIMARY KEY (placement, id)`)
			}
			if changed, err := mig.DistributeBy(ctx, target); err != nil || !changed {
				t.Fatalf("DistributeBy: %t, %v", changed, err)
			}
			if changed, err := mig.DistributeBy(ctx, target); err != nil || changed {
				t.Fatalf("DistributeBy again: %t, %v; want nothing to do", changed, err)
			}
			if dbtest.Citus() {
				e.exec(`CREATE TABLE ` + schema + `.others (tenant bigint PRIMARY KEY)`)
				e.exec(`SELECT create_distributed_table('` + schema + `.others', 'tenant', colocate_with => 'none')`)
				if _, err := mig.DistributeBy(ctx, idemmigrate.DistributeOptions{ColocateWith: schema + ".others"}); err == nil || !strings.Contains(err.Error(), "co-located with") {
					t.Fatalf("DistributeBy with another table to co-locate with: %v; want an error saying what the records are co-located with", err)
				}
				var colocated bool
				if err := pool.QueryRow(ctx, `SELECT column_to_column_name(r.logicalrelid, r.partkey) = 'placement' AND r.colocationid = t.colocationid
					FROM pg_dist_partition r, pg_dist_partition t
					WHERE r.logicalrelid = $1::regclass AND t.logicalrelid = $2::regclass`, schema+".records", schema+".tenants").Scan(&colocated); err != nil || !colocated {
					t.Fatalf("records distributed by placement, co-located with tenants: %t, %v", colocated, err)
				}
			}

			// Across the switch: the recording engine's execution in flight
			// completes; it goes on answering; a new engine replays.
			close(release2)
			if err := <-done2; err != nil {
				t.Fatalf("the execution in flight across the switch: %v", err)
			}
			run(recording, "after", false)
			placedEng := mustEngineWith(t, e, idem.Options{})
			for _, k := range []string{"new", "across", "after"} {
				run(placedEng, k, true)
			}
			run(placedEng, "last", false)
			run(recording, "last", true)
		})
	}
}
