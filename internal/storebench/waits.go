package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// With -waits, storebench measures what a duplicate's wait for the
// execution in flight costs (docs/runtime.md, "Duplicates wait"): how soon
// after the execution's final phase its waiters are answered, when the
// execution runs in the waiters' own engine (which wakes them at once) and
// in another (which they learn of from the watcher's looks), and how many
// statements the waiting engine sends a second while its requests wait.
// `make bench-wait` runs it; docs/performance.md has the figures.

// waitsConfig sizes the -waits measurement.
type waitsConfig struct {
	rounds  int           // executions per case
	waiters []int         // duplicates of each execution
	hold    time.Duration // how long an execution holds its key once its duplicates wait
}

func waitsDefaults() waitsConfig {
	return waitsConfig{rounds: 10, waiters: []int{1, 100}, hold: 2 * time.Second}
}

// waitCase is one line of the figure.
type waitCase struct {
	Mode    idem.ClaimMode
	Other   bool // the execution ran in another engine than its waiters
	Waiters int
	Rounds  int
	// From the end of the execution's final phase (its commit still to
	// come) to the owner's answer, and to each waiter's.
	Owner, P50, P99, Max time.Duration
	// Trips and Statements are the waiting engine's round trips and
	// statements a second while its requests waited, after their first
	// look.
	Trips, Statements float64
}

func (c waitCase) String() string {
	where := "same engine   "
	if c.Other {
		where = "another engine"
	}
	return fmt.Sprintf("%-9s %s %4d waiters x %2d: owner answered %s after its final phase, waiters p50 %s, p99 %s, max %s; while waiting %4.1f round trips/s (%5.1f statements/s)",
		c.Mode, where, c.Waiters, c.Rounds, ms(c.Owner), ms(c.P50), ms(c.P99), ms(c.Max), c.Trips, c.Statements)
}

// statementCounter counts the statements a pool sends, and its round
// trips: a statement alone, or a batch (a pipeline of statements).
type statementCounter struct{ statements, trips atomic.Int64 }

func (s *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.statements.Add(1)
	s.trips.Add(1)
	return ctx
}

func (s *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.trips.Add(1)
	return ctx
}

func (s *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	s.statements.Add(1)
}

func (s *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

const waitsSchema = "storebench_waits"

// runWaits measures every case: claim separate (the claim committed before
// the execution's first phase, as for an operation with a foreign call) and
// first (the claim uncommitted until the final phase commits), the
// execution in the waiters' engine and in another, for each count of
// waiters.
func runWaits(ctx context.Context, url string, cfg waitsConfig, w io.Writer) ([]waitCase, error) {
	counter := &statementCounter{}
	open := func(tracer pgx.QueryTracer) (*pgxpool.Pool, *idem.Engine, error) {
		pc, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, nil, err
		}
		pc.MaxConns = 20
		pc.ConnConfig.Tracer = tracer
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, nil, err
		}
		// A claim not yet committed is waited for on its row lock first
		// (ClaimWait); a short one has the watcher's looks measured.
		eng, err := idem.New(pool, idem.Options{Schema: waitsSchema, ClaimWait: 100 * time.Millisecond})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return pool, eng, nil
	}
	waitPool, waitEng, err := open(counter)
	if err != nil {
		return nil, err
	}
	defer waitPool.Close()
	if _, err := idemmigrate.New(waitPool, waitsSchema).Up(ctx); err != nil {
		return nil, err
	}
	otherPool, otherEng, err := open(nil)
	if err != nil {
		return nil, err
	}
	defer otherPool.Close()

	fmt.Fprintf(w, "waits: an execution holds its key %v (and up to %v more, at random) after its duplicates arrive; the watcher looks every 50 ms (100 ms at a key an uncommitted claim holds); times from the end of the final phase (its commit still to come)\n", cfg.hold, uncommittedLook)
	var out []waitCase
	for _, mode := range []idem.ClaimMode{idem.ClaimSeparate, idem.ClaimFirst} {
		for _, other := range []bool{false, true} {
			for _, n := range cfg.waiters {
				owner := waitEng
				if other {
					owner = otherEng
				}
				c, err := measureWait(ctx, cfg, mode, owner, waitEng, counter, n)
				if err != nil {
					return out, fmt.Errorf("%s, %d waiters: %w", mode, n, err)
				}
				c.Other = other
				out = append(out, c)
				fmt.Fprintf(w, "   %s\n", c)
			}
		}
	}
	return out, nil
}

// measureWait runs cfg.rounds executions in owner, each with n duplicates
// sent to waiters while it holds its key.
func measureWait(ctx context.Context, cfg waitsConfig, mode idem.ClaimMode, owner, waiters *idem.Engine, counter *statementCounter, n int) (waitCase, error) {
	c := waitCase{Mode: mode, Waiters: n, Rounds: cfg.rounds}
	op := &idem.Operation{ID: "holdPayment", Policy: idem.Policy{Retention: retention, Claim: mode}}
	var lat, owners []time.Duration
	var statements, trips int64
	var waited time.Duration
	for range cfg.rounds {
		fp := sha256.Sum256([]byte("waits"))
		req := idem.KeyedRequest{Scope: "acct_waits", Key: idemclient.NewKey(), Fingerprint: fp[:]}
		holding, release := make(chan struct{}), make(chan struct{})
		var finalEnd time.Time
		hold := func(ctx context.Context) error {
			close(holding)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		final := func(ctx context.Context, tx pgx.Tx, _ *benchState) (*idem.Response, error) {
			if mode == idem.ClaimFirst {
				if err := hold(ctx); err != nil {
					return nil, err
				}
			}
			finalEnd = time.Now()
			return &idem.Response{Status: http.StatusCreated, Body: []byte(`{"id":1}`)}, nil
		}
		phases := []idem.Phase[benchState]{{Name: "finish", Final: final}}
		if mode == idem.ClaimSeparate {
			phases = append([]idem.Phase[benchState]{{Name: "hold", Foreign: func(ctx context.Context, _ string, _ *benchState) error { return hold(ctx) }}}, phases...)
		}
		ownerDone := make(chan error, 1)
		var ownerAt time.Time
		go func() {
			_, err := idem.Run(ctx, owner, op, req, phases)
			ownerAt = time.Now()
			ownerDone <- err
		}()
		select {
		case <-holding:
		case err := <-ownerDone:
			return c, fmt.Errorf("the execution ended before it held its key: %v", err)
		}
		at := make([]time.Time, n)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := idem.Run(ctx, waiters, op, req, mustNotRun(phases))
				at[i] = time.Now()
				switch {
				case err != nil:
					errs <- err
				case !o.Replayed || o.Response.Status != http.StatusCreated:
					errs <- fmt.Errorf("a duplicate got status %d, replayed %t; want the execution's 201, replayed", o.Response.Status, o.Replayed)
				}
			}()
		}
		// The duplicates' first look (a claim, a read, in first mode a
		// wait of ClaimWait on the row lock, 20 at a time) is over within
		// the first half of the hold; the statements of the rest are the
		// waiting's.
		time.Sleep(cfg.hold / 2)
		fromS, fromT, t0 := counter.statements.Load(), counter.trips.Load(), time.Now()
		time.Sleep(cfg.hold - cfg.hold/2)
		statements += counter.statements.Load() - fromS
		trips += counter.trips.Load() - fromT
		waited += time.Since(t0)
		// The execution ends anywhere between two of the watcher's looks.
		time.Sleep(rand.N(uncommittedLook))
		close(release)
		wg.Wait()
		if err := <-ownerDone; err != nil {
			return c, fmt.Errorf("the execution: %w", err)
		}
		close(errs)
		if err := <-errs; err != nil {
			return c, err
		}
		owners = append(owners, ownerAt.Sub(finalEnd))
		for _, t := range at {
			lat = append(lat, t.Sub(finalEnd))
		}
	}
	slices.Sort(lat)
	slices.Sort(owners)
	c.Owner = owners[len(owners)/2]
	c.P50, c.P99, c.Max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	c.Statements, c.Trips = float64(statements)/waited.Seconds(), float64(trips)/waited.Seconds()
	return c, nil
}

// uncommittedLook is the longest time between two looks of a waiter at its
// key (the engine's uncommittedEvery).
const uncommittedLook = 100 * time.Millisecond

// mustNotRun is phases with the same names and kinds, each of which fails:
// a duplicate that waits is answered with the execution's response and
// runs none.
func mustNotRun(phases []idem.Phase[benchState]) []idem.Phase[benchState] {
	ran := errors.New("a duplicate ran a phase")
	out := make([]idem.Phase[benchState], len(phases))
	for i, p := range phases {
		out[i].Name = p.Name
		if p.Foreign != nil {
			out[i].Foreign = func(context.Context, string, *benchState) error { return ran }
		} else {
			out[i].Final = func(context.Context, pgx.Tx, *benchState) (*idem.Response, error) { return nil, ran }
		}
	}
	return out
}
