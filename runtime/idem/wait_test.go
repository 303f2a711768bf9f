package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// gate is a foreign phase that holds its execution until opened: the
// record is committed and its owner live, renewing its lease, meanwhile.
type gate struct {
	in, open chan struct{}
	once     sync.Once
}

func newGate() *gate { return &gate{in: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) phases(key string) []idem.Phase[payState] {
	return append([]idem.Phase[payState]{{Name: "hold", Foreign: func(context.Context, string, *payState) error {
		g.once.Do(func() { close(g.in) })
		<-g.open
		return nil
	}}}, twoPhases(key)...)
}

// otherInstance is a second engine on e's schema, with a pool of its own:
// another instance of the service.
func otherInstance(t *testing.T, e *env, opts idem.Options) *idem.Engine {
	t.Helper()
	cfg := e.pool.Config().Copy()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts.Schema = e.schema
	if opts.Claim == idem.ClaimAuto {
		opts.Claim = e.mode.claim
	}
	eng, err := idem.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// TestDuplicatesWaitForTheExecutionInFlight: an execution in another
// engine instance holds a key for 2 s; 20 duplicates sent meanwhile all
// receive its response, replayed; one whose client prefers not to wait
// (Prefer: wait=0) is answered 409 at once, while the key is still held.
func TestDuplicatesWaitForTheExecutionInFlight(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		owner := otherInstance(t, e, idem.Options{})
		g := newGate()
		first := make(chan *idem.Outcome, 1)
		go func() {
			o, err := idem.Run(ctx, owner, payOp, request("t", "k", "b"), g.phases("k"))
			if err != nil {
				t.Errorf("owner: %v", err)
			}
			first <- o
		}()
		<-g.in
		held := time.AfterFunc(2*time.Second, func() { close(g.open) })
		defer held.Stop()

		type answer struct {
			o   *idem.Outcome
			err error
		}
		answers := make(chan answer, 20)
		for range 20 {
			go func() {
				o, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), g.phases("k"))
				answers <- answer{o, err}
			}()
		}
		impatient := request("t", "k", "b")
		impatient.Wait, impatient.WaitSent = 0, true
		_, err := idem.Run(ctx, e.eng, payOp, impatient, g.phases("k"))
		select {
		case <-g.open:
			t.Fatalf("Prefer: wait=0 was answered only after the execution ended (%v); want 409 at once", err)
		default:
		}
		var perr *idem.Error
		if !errors.As(err, &perr) || perr.Kind != idemtype.KindInFlight || perr.RetryAfter <= 0 {
			t.Fatalf("Prefer: wait=0: %v; want 409 in flight with Retry-After", err)
		}

		o := <-first
		for range 20 {
			a := <-answers
			if a.err != nil {
				t.Fatalf("a duplicate: %v; want the owner's answer, replayed", a.err)
			}
			if !a.o.Replayed || !sameResponse(a.o.Response, o.Response) {
				t.Fatalf("a duplicate got %+v (replayed %t); want the owner's %+v, replayed", a.o.Response, a.o.Replayed, o.Response)
			}
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k'`); n != 1 {
			t.Fatalf("%d business rows; want the owner's only", n)
		}
		if n := e.ev.count(idem.EventWait); n != 20 {
			t.Fatalf("%d waits observed; want 20", n)
		}
	}, notIn{idem.ClaimLast, "a last-mode record is inserted completed: no duplicate ever finds one in flight"})
}

// TestReleasedExecutionWakesOneWaiter: when the execution that waiters wait
// on fails before any effect, its key is released; the waiters get what a
// retry would: one of them claims the key and executes, and the others
// replay its answer. Nothing is lost and nothing runs twice. The owner
// holds its first local phase: in first mode its claim is not committed
// yet, in separate mode it is.
func TestReleasedExecutionWakesOneWaiter(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		owner := otherInstance(t, e, idem.Options{})
		in, open := make(chan struct{}), make(chan struct{})
		failed := make(chan error, 1)
		go func() {
			phases := twoPhases("k")
			phases[0].Local = func(context.Context, pgx.Tx, *payState) error {
				close(in)
				<-open
				return idem.Release(errors.New("declined"))
			}
			_, err := idem.Run(ctx, owner, payOp, request("t", "k", "b"), phases)
			failed <- err
		}()
		<-in
		var runs atomic.Int32
		results := make(chan *idem.Outcome, 10)
		errs := make(chan error, 10)
		for range 10 {
			go func() {
				phases := twoPhases("k")
				record := phases[0].Local
				phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
					runs.Add(1)
					return record(ctx, tx, s)
				}
				o, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
				if err != nil {
					errs <- err
					return
				}
				results <- o
			}()
		}
		time.Sleep(500 * time.Millisecond) // the duplicates wait
		close(open)
		if err := <-failed; err == nil || !strings.Contains(err.Error(), "declined") {
			t.Fatalf("owner: %v; want its release", err)
		}
		fresh := 0
		var answer *idem.Response
		for range 10 {
			select {
			case err := <-errs:
				t.Fatalf("a waiter: %v; want an answer", err)
			case o := <-results:
				if !o.Replayed {
					fresh++
				}
				if answer == nil {
					answer = o.Response
				} else if !sameResponse(answer, o.Response) {
					t.Fatalf("waiters answered differently: %+v and %+v", answer, o.Response)
				}
			}
		}
		if fresh != 1 || runs.Load() != 1 {
			t.Fatalf("%d fresh answers, the phase ran %d times; want one execution, the other waiters replaying it", fresh, runs.Load())
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k'`); n != 1 {
			t.Fatalf("%d business rows; want 1", n)
		}
	}, notIn{idem.ClaimLast, "a last-mode record is inserted completed: no duplicate ever finds one in flight"})
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for range 400 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestWaitEndsWithTheClient: a waiting request whose client goes away
// (its context ends) stops waiting, and says so (EventWait, client_gone);
// the execution it waited on goes on.
func TestWaitEndsWithTheClient(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		var causes sync.Map
		eng := mustEngineWith(t, e, idem.Options{Observer: idem.ObserverFunc(func(ev idem.Event) {
			if ev.Kind == idem.EventWait {
				causes.Store(ev.Cause, true)
			}
		})})
		owner := otherInstance(t, e, idem.Options{})
		g := newGate()
		done := make(chan *idem.Outcome, 1)
		go func() {
			o, _ := idem.Run(context.Background(), owner, payOp, request("t", "k", "b"), g.phases("k"))
			done <- o
		}()
		<-g.in
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			_, err := idem.Run(ctx, eng, payOp, request("t", "k", "b"), g.phases("k"))
			gone <- err
		}()
		time.Sleep(200 * time.Millisecond) // the duplicate waits
		cancel()
		err := <-gone
		select {
		case <-g.open:
		default:
			close(g.open)
		}
		if !errors.Is(err, context.Canceled) || kindOf(err) != idemtype.KindInFlight {
			t.Fatalf("a waiter whose client left: %v; want 409 in flight wrapping context.Canceled", err)
		}
		if _, ok := causes.Load(idem.WaitClientGone); !ok {
			t.Fatal("no EventWait with cause client_gone")
		}
		if o := <-done; o == nil || o.Response.Status != 201 {
			t.Fatalf("the owner: %+v; want its 201", o)
		}
	}, notIn{idem.ClaimLast, "a last-mode record is inserted completed: no duplicate ever finds one in flight"})
}

// countingTracer counts the statements sent on a pool.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestWaitersDoNotStampede: 100 duplicates wait on one key in one
// instance; when the execution completes in another, they are answered
// with a handful of statements, not one or more each: the watcher reads
// the completed record once and hands it to all of them.
func TestWaitersDoNotStampede(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tracer := &countingTracer{}
		cfg := e.pool.Config().Copy()
		cfg.ConnConfig.Tracer = tracer
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		ev := &events{n: map[idem.EventKind]int{}}
		// A short claim wait: in first mode the owner's claim is not
		// committed, and a duplicate's claim waits on its row lock for the
		// claim wait before it waits as a waiter; the count below must not
		// settle while claims are still blocked there (on Citus, 82 and 91
		// of 100 waits were seen with the default 2 s).
		waiters, err := idem.New(pool, idem.Options{Schema: e.schema, Claim: e.mode.claim, Observer: ev, ClaimWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		owner := otherInstance(t, e, idem.Options{})
		g := newGate()
		done := make(chan *idem.Outcome, 1)
		go func() {
			o, _ := idem.Run(ctx, owner, payOp, request("t", "k", "b"), g.phases("k"))
			done <- o
		}()
		<-g.in
		answers := make(chan error, 100)
		var arrived atomic.Int32
		for range 100 {
			go func() {
				arrived.Add(1)
				o, err := idem.Run(ctx, waiters, payOp, request("t", "k", "b"), g.phases("k"))
				if err == nil && !o.Replayed {
					err = fmt.Errorf("a fresh answer %+v; want the replay", o.Response)
				}
				answers <- err
			}()
		}
		// Every waiter has made its claim and read (a few statements each)
		// and waits: the count stops growing but for the watcher's looks.
		waitFor(t, func() bool { return arrived.Load() == 100 }, "the waiters")
		var before int64
		for {
			time.Sleep(300 * time.Millisecond)
			n := tracer.n.Load()
			if n-before < 100 {
				break
			}
			before = n
		}
		before = tracer.n.Load()
		close(g.open)
		<-done
		for range 100 {
			if err := <-answers; err != nil {
				t.Fatal(err)
			}
		}
		// After the owner's commit: a look or two (Watch) and one read of
		// the completed record; a few more looks may have run while the
		// owner's last phases committed.
		if n := tracer.n.Load() - before; n > 40 {
			t.Fatalf("%d statements answered 100 waiters; want a handful (a read and the watcher's looks)", n)
		}
		if n := ev.count(idem.EventWait); n != 100 {
			t.Fatalf("%d waits observed; want 100", n)
		}
	}, notIn{idem.ClaimLast, "a last-mode record is inserted completed: no duplicate ever finds one in flight"})
}

// ownerChildEnv, in the child process TestKilledOwnerIsReplacedInSeconds
// starts, names the schema whose key the child claims and holds in a
// foreign call until it is killed.
const ownerChildEnv = "IDEMGEN_TEST_OWNER_CHILD"

// ownerChild is the child's side: the execution of key "k" on the schema,
// whose foreign charge is made (its derived key written to charges, as the
// card network would), then hangs, renewing its lease, until the process
// is killed with SIGKILL.
func ownerChild() {
	parts := strings.SplitN(os.Getenv(ownerChildEnv), "/", 3)
	schema, claim, database := parts[0], parts[1], parts[2]
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.Database = database
	if !dbtest.Pooled() {
		// A pooler refuses it in the startup packet; its database sets it.
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	eng, err := idem.New(pool, idem.Options{Schema: schema, Claim: idem.ClaimMode(claim)})
	if err != nil {
		panic(err)
	}
	idem.Run(ctx, eng, killOp, request("t", "k", "b"), chargePhases(pool, func() { time.Sleep(time.Hour) }))
	panic("the execution ended; it should hang until killed")
}

// killOp has the default lease.
var killOp = &idem.Operation{ID: "createPayment"}

// chargePhases record a row, charge at the card network (the charges
// table, one charge per derived key, written outside the phase's
// transaction as another system would) and call after, then finish.
func chargePhases(pool *pgxpool.Pool, after func()) []idem.Phase[payState] {
	phases := twoPhases("k")
	charge := idem.Phase[payState]{Name: "charge", Foreign: func(ctx context.Context, key string, s *payState) error {
		if _, err := pool.Exec(ctx, `INSERT INTO charges (key) VALUES ($1) ON CONFLICT DO NOTHING`, key); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `UPDATE charges SET calls = calls + 1 WHERE key = $1`, key); err != nil {
			return err
		}
		s.ChargeID = key
		after()
		return nil
	}}
	return []idem.Phase[payState]{phases[0], charge, phases[1]}
}

// TestKilledOwnerIsReplacedInSeconds: the process running an execution is
// killed (SIGKILL) in its foreign call; a retry sent at once waits, takes
// the execution over when the dead owner's lease runs out (the default
// lease, 5 s, renewed every third of it while the owner lived), and
// completes it: one charge, under the derived key the dead owner used.
func TestKilledOwnerIsReplacedInSeconds(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		e.exec(`CREATE TABLE charges (key text PRIMARY KEY, calls int NOT NULL DEFAULT 0)`)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		child := exec.CommandContext(ctx, os.Args[0], "-test.run", "^$")
		// The child connects as the test's pool does: to its database (its
		// own one through a pooler, where the search_path is the
		// database's), with the pool's query exec mode from the URL.
		child.Env = append(os.Environ(), ownerChildEnv+"="+e.schema+"/"+string(e.mode.claim)+"/"+e.pool.Config().ConnConfig.Database,
			"DATABASE_URL="+dbtest.URL(t))
		out := &strings.Builder{}
		child.Stdout, child.Stderr = out, out
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return e.count(`SELECT count(*) FROM charges WHERE calls = 1`) == 1 }, "the child's charge")
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		child.Wait()
		killed := time.Now()
		o, err := idem.Run(ctx, e.eng, killOp, request("t", "k", "b"), chargePhases(e.pool, func() {}))
		took := time.Since(killed)
		if err != nil {
			t.Fatalf("the retry after the kill: %v; want it to take over and complete (child's output:\n%s)", err, out)
		}
		if !o.Resumed || o.Response.Status != 201 {
			t.Fatalf("the retry: %+v; want the execution resumed and completed", o)
		}
		var keys, calls int
		if err := e.pool.QueryRow(ctx, `SELECT count(*), sum(calls) FROM charges`).Scan(&keys, &calls); err != nil {
			t.Fatal(err)
		}
		if keys != 1 || calls != 2 {
			t.Fatalf("%d charge keys, %d calls; want one key, called by the dead owner and again by the takeover", keys, calls)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k'`); n != 1 {
			t.Fatalf("%d business rows; want 1", n)
		}
		t.Logf("answered %v after the kill", took.Round(10*time.Millisecond))
	}, notIn{idem.ClaimLast, "its phases include a foreign one, which last mode does not run"})
}
