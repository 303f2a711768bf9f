package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// smallPool is a pool of size connections to e's schema.
func smallPool(t *testing.T, e *env, size int32) *pgxpool.Pool {
	t.Helper()
	return poolLike(t, e.pool, func(cfg *pgxpool.Config) { cfg.MaxConns, cfg.MinConns = size, 0 })
}

// TestHandlersThatQueryThePoolDoNotStarveIt: 32 concurrent requests on a
// pool of 2 and of 4 connections, whose code also queries the pool
// directly (a lookup in another module, behind the service's own
// database interface), besides its writes through the execution: a kept
// handler with its lookup before and after its final transaction began, a
// handler with a Local step whose function looks up on the pool, and
// phases whose local phase does. Every request completes: no execution
// holds a connection while it waits for another one. In every claim mode.
func TestHandlersThatQueryThePoolDoNotStarveIt(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		e.exec(`CREATE TABLE lookups (id int PRIMARY KEY, name text NOT NULL)`)
		e.exec(`INSERT INTO lookups VALUES (1, 'exam')`)
		for _, size := range []int32{2, 4} {
			pool := smallPool(t, e, size)
			eng, err := idem.New(pool, idem.Options{Schema: e.schema, Claim: e.mode.claim, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			op := &idem.Operation{ID: "startExam", Policy: idem.Policy{Lease: 5 * time.Second}}
			lookup := func(ctx context.Context) error {
				var name string
				time.Sleep(5 * time.Millisecond) // the handler's other work
				return pool.QueryRow(ctx, `SELECT name FROM lookups WHERE id = 1`).Scan(&name)
			}
			kept := func(key string) idem.Handler {
				return func(ctx context.Context) (*idem.Response, error) {
					if err := lookup(ctx); err != nil {
						return nil, err
					}
					if _, err := idem.DB(ctx, pool).Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key); err != nil {
						return nil, err
					}
					if err := lookup(ctx); err != nil {
						return nil, err
					}
					return created(`{}`), nil
				}
			}
			stepped := func(key string) idem.Handler {
				return func(ctx context.Context) (*idem.Response, error) {
					if _, err := idem.Local(ctx, pool, "reserve", func(ctx context.Context, tx pgx.Tx) (int, error) {
						if err := lookup(ctx); err != nil {
							return 0, err
						}
						_, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key)
						return 1, err
					}); err != nil {
						return nil, err
					}
					if _, err := idem.Foreign(ctx, "notify", func(ctx context.Context, _ string) (int, error) { return 1, lookup(ctx) }); err != nil {
						return nil, err
					}
					return created(`{}`), nil
				}
			}
			phases := func(key string) []idem.Phase[payState] {
				return []idem.Phase[payState]{{Name: "record", Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
					if err := lookup(ctx); err != nil {
						return nil, err
					}
					if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key); err != nil {
						return nil, err
					}
					return created(`{}`), nil
				}}}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					key := fmt.Sprintf("p%d-%d", size, i)
					var out *idem.Outcome
					var err error
					for {
						switch i % 3 {
						case 0:
							out, err = idem.RunHandler(ctx, eng, op, request("t", key, "b"), kept(key))
						case 1:
							if e.mode.claim == idem.ClaimLast {
								out, err = idem.RunHandler(ctx, eng, op, request("t", key, "b"), kept(key))
							} else {
								out, err = idem.RunHandler(ctx, eng, op, request("t", key, "b"), stepped(key))
							}
						default:
							out, err = idem.Run(ctx, eng, op, request("t", key, "b"), phases(key))
						}
						var ie *idem.Error
						if errors.As(err, &ie) && ie.Kind == idemtype.KindUnavailable && ie.RetryAfter > 0 && ctx.Err() == nil {
							continue // 503 with Retry-After: a client retries
						}
						break
					}
					if err != nil || out.Response.Status != 201 {
						errs <- fmt.Errorf("pool of %d, request %d: %v, %+v", size, i, err, out)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := e.count(`SELECT count(*) FROM rows WHERE key LIKE $1`, fmt.Sprintf("p%d-%%", size)); n != 32 {
				t.Errorf("pool of %d: %d rows, want 32", size, n)
			}
		}
	})
}

// TestExhaustedPoolIsAnswered503: when every connection of the pool is
// taken by something else for longer than the engine waits for one
// (Options.PoolWait), a request is answered 503 with Retry-After, never a
// 500 or context canceled, and the engine logs it once, saying which pool
// and how to size it. In every claim mode.
func TestExhaustedPoolIsAnswered503(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pool := smallPool(t, e, 2)
		var logs bytes.Buffer
		var mu sync.Mutex
		eng, err := idem.New(pool, idem.Options{Schema: e.schema, Claim: e.mode.claim, PoolWait: 300 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		held := []*pgxpool.Conn{}
		for range 2 {
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		for i := range 3 {
			_, err := idem.Run(ctx, eng, payOp, request("t", fmt.Sprint("x", i), "b"), twoPhases(fmt.Sprint("x", i)))
			var ie *idem.Error
			if !errors.As(err, &ie) || ie.Kind != idemtype.KindUnavailable || ie.RetryAfter <= 0 {
				t.Fatalf("request %d on an exhausted pool: %v; want 503 unavailable with Retry-After", i, err)
			}
		}
		for _, c := range held {
			c.Release()
		}
		if _, err := idem.Run(ctx, eng, payOp, request("t", "x0", "b"), twoPhases("x0")); err != nil {
			t.Fatalf("once the pool has room: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if n := strings.Count(logs.String(), "pool exhausted"); n != 1 || !strings.Contains(logs.String(), "MaxConns") {
			t.Errorf("%d log lines on the exhausted pool, want 1 naming MaxConns:\n%s", n, logs.String())
		}
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestExhaustedPoolKeepsWhatMayHaveHadAnEffect: a foreign phase ran (its
// call may have had its effect), and the next phase finds no connection
// within PoolWait: the request is answered 503, and the record is kept,
// not released, so that the key stays bound to its request and the retry
// resumes. In every claim mode but last, whose claim is the last phase's.
func TestExhaustedPoolKeepsWhatMayHaveHadAnEffect(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pool := smallPool(t, e, 2)
		eng, err := idem.New(pool, idem.Options{Schema: e.schema, Claim: e.mode.claim, PoolWait: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var held []*pgxpool.Conn
		grab := true
		phases := []idem.Phase[payState]{
			{Name: "charge", Foreign: func(ctx context.Context, _ string, s *payState) error {
				s.ChargeID = "ch_1"
				for grab && len(held) < 2 { // the charge is made; the service's other work takes the pool
					c, err := pool.Acquire(ctx)
					if err != nil {
						return err
					}
					held = append(held, c)
				}
				return nil
			}},
			{Name: "record", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				_, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ('kept', $1)`, s.ChargeID)
				return created(`{}`), err
			}},
		}
		_, err = idem.Run(ctx, eng, payOp, request("t", "kept", "b"), phases)
		var ie *idem.Error
		if !errors.As(err, &ie) || ie.Kind != idemtype.KindUnavailable || ie.RetryAfter <= 0 {
			t.Fatalf("the phase after the charge, without a connection: %v; want 503 with Retry-After", err)
		}
		for _, c := range held {
			c.Release()
		}
		grab = false
		if n := e.count(`SELECT count(*) FROM records`); n != 1 {
			t.Fatalf("%d records after the 503; want the claim kept", n)
		}
		if _, err := idem.Run(ctx, eng, payOp, request("t", "kept", "other body"), phases); kindOf(err) != idemtype.KindMismatch {
			t.Errorf("another request under the key: %v; want it refused as a mismatch, the key still bound", err)
		}
		// The pool had no connection to give the lease back with either: it
		// runs out by itself.
		e.expireLeases()
		out, err := idem.Run(ctx, eng, payOp, request("t", "kept", "b"), phases)
		if err != nil || out.Response.Status != 201 {
			t.Fatalf("the retry: %+v, %v; want the execution resumed and answered", out, err)
		}
	}, notIn{idem.ClaimLast, "a last-mode claim is the last phase's commit: nothing is claimed before it"})
}

// TestKeylessPanicsGiveTheirTurnBack: a request without a key whose phase
// panics gives its connection and its turn back, so that the keyed
// requests after it still get theirs.
func TestKeylessPanicsGiveTheirTurnBack(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pool := smallPool(t, e, 2) // one turn
	eng, err := idem.New(pool, idem.Options{Schema: e.schema, PoolWait: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	boom := []idem.Phase[payState]{{Name: "boom", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) { panic("boom") }}}
	for range 3 {
		func() {
			defer func() { recover() }()
			idem.RunWithoutKey(ctx, eng, payOp, boom)
		}()
	}
	if _, err := idem.Run(ctx, eng, payOp, request("t", "after", "b"), twoPhases("after")); err != nil {
		t.Fatalf("a keyed request after three panicking keyless ones: %v; want its turn", err)
	}
}
