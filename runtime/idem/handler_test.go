package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// payments is a handler written as a plain one would be: a local step
// that records the payment, a call to the card network, and a final write
// in a transaction begun with idem.Begin, then the answer. Called through
// idem.RunHandler it is idempotent; called directly, it runs as before.
type payments struct {
	db      idem.Beginner
	calls   sync.Map // key -> *atomic.Int32: the card network's charges
	noCard  bool     // the reservation fails: the handler answers 404
	dieWhen string   // "after-charge": the execution dies between the call and the final write
	reorder bool     // a later version that takes its steps in another order
}

func (p *payments) charge(_ context.Context, key string) (string, error) {
	n, _ := p.calls.LoadOrStore(key, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
	return "ch_" + key[:min(8, len(key))], nil
}

func (p *payments) charges() (total int) {
	p.calls.Range(func(_, v any) bool {
		total += int(v.(*atomic.Int32).Load())
		return true
	})
	return total
}

func (p *payments) handle(ctx context.Context, key string) (*idem.Response, error) {
	if p.reorder {
		if _, err := idem.Foreign(ctx, "charge", p.charge); err != nil {
			return nil, err
		}
	}
	id, err := idem.Local(ctx, p.db, "record", func(ctx context.Context, tx pgx.Tx) (int, error) {
		if p.noCard {
			return 0, errors.New("no such card")
		}
		_, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ($1, 'pending')`, key)
		return 7, err
	})
	if err != nil {
		return &idem.Response{Status: 404, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"error":"` + err.Error() + `"}`)}, nil
	}
	charge, err := idem.Foreign(ctx, "charge", p.charge)
	if err != nil {
		return nil, err
	}
	if p.dieWhen == "after-charge" {
		runtime.Goexit()
	}
	tx, err := idem.Begin(ctx, p.db)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE rows SET note = $2 WHERE key = $1`, key, "paid "+charge); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return &idem.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}},
		Body: fmt.Appendf(nil, `{"id":%d,"charge":%q}`, id, charge)}, nil
}

// TestHandlerStepsResumeWithoutASecondCall: a handler with a local step, a
// foreign call and a final write, killed between the call and the final
// write, is resumed by its retry from the top: the recorded steps return
// their results without running, the card network is called once, and the
// answer is the one a clean run gives. In every claim mode.
func TestHandlerStepsResumeWithoutASecondCall(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		p := &payments{db: e.pool, dieWhen: "after-charge"}
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.RunHandler(ctx, e.eng, payOp, request("t", "k1", "b"), func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "k1") })
		}()
		<-done
		if n := p.charges(); n != 1 {
			t.Fatalf("%d charges before the crash, want 1", n)
		}
		e.expireLeases()
		p.dieWhen = ""
		out, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "k1", "b"), func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "k1") })
		if err != nil {
			t.Fatal(err)
		}
		if !out.Resumed || out.Response.Status != 201 || !strings.Contains(string(out.Response.Body), `"id":7`) {
			t.Fatalf("the retry: %+v %s; want a resumed 201 with the recorded id", out, out.Response.Body)
		}
		if n := p.charges(); n != 1 {
			t.Errorf("%d charges after the resume, want 1: a recorded foreign step ran again", n)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k1' AND note LIKE 'paid ch_%'`); n != 1 {
			t.Errorf("%d paid rows, want 1", n)
		}
		again, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "k1", "b"), func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "k1") })
		if err != nil || !again.Replayed || string(again.Response.Body) != string(out.Response.Body) {
			t.Fatalf("the retry of the completed key: %+v, %v; want the same answer, replayed", again, err)
		}
	})
}

// TestHandlerRunsAsAPlainOneOutsideAnExecution: the same handler, called
// directly with the pool (as before it was made idempotent) and through
// RunHandler, leaves the same rows and gives the same answer; the plain
// call gets a new key from idem.Foreign each time.
func TestHandlerRunsAsAPlainOneOutsideAnExecution(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		plain := &payments{db: e.pool}
		direct, err := plain.handle(ctx, "plain")
		if err != nil {
			t.Fatal(err)
		}
		viaIdem := &payments{db: e.pool}
		out, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "idem", "b"), func(ctx context.Context) (*idem.Response, error) { return viaIdem.handle(ctx, "idem") })
		if err != nil {
			t.Fatal(err)
		}
		if direct.Status != out.Response.Status || !strings.Contains(string(direct.Body), `"id":7`) {
			t.Errorf("plain %d %s, through idemgen %d %s", direct.Status, direct.Body, out.Response.Status, out.Response.Body)
		}
		for _, k := range []string{"plain", "idem"} {
			if n := e.count(`SELECT count(*) FROM rows WHERE key = $1 AND note LIKE 'paid ch_%'`, k); n != 1 {
				t.Errorf("%s: %d paid rows, want 1", k, n)
			}
		}
		if _, err := idem.Tx(ctx); !errors.Is(err, idem.ErrNoExecution) {
			t.Errorf("Tx outside an execution: %v, want ErrNoExecution", err)
		}
	})
}

// TestHandlerAnswersAreStoredWhateverTheirStatus: a handler's own 404
// (its local step failed, nothing committed) is stored and replayed like
// its 201; a handler's error rolls back what its final transaction wrote
// and frees the key.
func TestHandlerAnswersAreStoredWhateverTheirStatus(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		p := &payments{db: e.pool, noCard: true}
		run := func(key string, h idem.Handler) (*idem.Outcome, error) {
			return idem.RunHandler(ctx, e.eng, payOp, request("t", key, "b"), h)
		}
		for i := range 2 {
			out, err := run("nf", func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "nf") })
			if err != nil || out.Response.Status != 404 || out.Replayed != (i == 1) {
				t.Fatalf("attempt %d: %+v, %v; want 404, replayed the second time", i, out, err)
			}
		}
		if n := p.charges(); n != 0 {
			t.Errorf("%d charges for a refused payment", n)
		}
		failing := func(ctx context.Context) (*idem.Response, error) {
			tx, err := idem.Tx(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('err')`); err != nil {
				return nil, err
			}
			return nil, errors.New("the handler gives up")
		}
		if _, err := run("err", failing); err == nil {
			t.Fatal("a handler's error was not returned")
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'err'`); n != 0 {
			t.Errorf("the failed handler's row committed")
		}
		out, err := run("err", func(ctx context.Context) (*idem.Response, error) { return created(`{}`), nil })
		if err != nil || out.Replayed {
			t.Fatalf("the retry after a failure with no effect: %+v, %v; want it to execute", out, err)
		}
	})
}

// TestHandlerThatChangesItsStepsIsNotResumed: a resumed run whose steps
// differ from the record's (a new version of the handler, or one that
// decides from the clock) fails without running the step, and the record
// is kept for an operator; a step after the final transaction began, and
// a repeated step name, are the handler's error.
func TestHandlerThatChangesItsStepsIsNotResumed(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		p := &payments{db: e.pool, dieWhen: "after-charge"}
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.RunHandler(ctx, e.eng, payOp, request("t", "ch", "b"), func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "ch") })
		}()
		<-done
		e.expireLeases()
		p.dieWhen, p.reorder = "", true
		_, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "ch", "b"), func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "ch") })
		var ie *idem.Error
		if !errors.As(err, &ie) || ie.Kind != idemtype.KindFailed || !strings.Contains(err.Error(), "same steps in the same order") {
			t.Fatalf("a resumed run with other steps: %v; want a failure naming the rule", err)
		}
		if n := p.charges(); n != 1 {
			t.Errorf("%d charges, want 1", n)
		}

		late := func(ctx context.Context) (*idem.Response, error) {
			if _, err := idem.Tx(ctx); err != nil {
				return nil, err
			}
			if _, err := idem.Local(ctx, e.pool, "late", func(context.Context, pgx.Tx) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			return created(`{}`), nil
		}
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "late", "b"), late); err == nil || !strings.Contains(err.Error(), "after the handler began its final transaction") {
			t.Errorf("a step after Tx: %v", err)
		}
		twice := func(ctx context.Context) (*idem.Response, error) {
			for range 2 {
				if _, err := idem.Local(ctx, e.pool, "same", func(context.Context, pgx.Tx) (int, error) { return 1, nil }); err != nil {
					return nil, err
				}
			}
			return created(`{}`), nil
		}
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "twice", "b"), twice); err == nil || !strings.Contains(err.Error(), "repeated") {
			t.Errorf("a repeated step name: %v", err)
		}
	})
}

// TestHandlerQueriesThroughDB: a handler whose queries ran on the pool
// runs them through idem.DB(ctx, pool): the same code, called directly,
// writes through the pool; run by the engine, through the execution's
// transaction, so that a failure after the write leaves nothing.
func TestHandlerQueriesThroughDB(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		fail := false
		handler := func(key string) idem.Handler {
			return func(ctx context.Context) (*idem.Response, error) {
				if _, err := idem.DB(ctx, e.pool).Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key); err != nil {
					return nil, err
				}
				if fail {
					return nil, errors.New("fails after its write")
				}
				return created(`{}`), nil
			}
		}
		if _, err := handler("plain")(ctx); err != nil {
			t.Fatal(err)
		}
		fail = true
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "failed", "b"), handler("failed")); err == nil {
			t.Fatal("the handler's error was not returned")
		}
		fail = false
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "ok", "b"), handler("ok")); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]int{"plain": 1, "failed": 0, "ok": 1} {
			if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != want {
				t.Errorf("%s: %d rows, want %d", key, n, want)
			}
		}
	})
}

type requestValue struct{}

// TestHandlerSeesItsRequestsContext: the handler runs with the request's
// context values (a middleware's), on the first execution; a retry that
// resumes an interrupted one runs it with the retry's.
func TestHandlerSeesItsRequestsContext(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		var seen []any
		die := true
		h := func(ctx context.Context) (*idem.Response, error) {
			seen = append(seen, ctx.Value(requestValue{}))
			if _, err := idem.Foreign(ctx, "call", func(context.Context, string) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			if die {
				runtime.Goexit()
			}
			return created(`{}`), nil
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.RunHandler(context.WithValue(context.Background(), requestValue{}, "first"), e.eng, payOp, request("t", "ctx", "b"), h)
		}()
		<-done
		e.expireLeases()
		die = false
		out, err := idem.RunHandler(context.WithValue(context.Background(), requestValue{}, "retry"), e.eng, payOp, request("t", "ctx", "b"), h)
		if err != nil || !out.Resumed {
			t.Fatalf("the retry: %+v, %v", out, err)
		}
		if len(seen) != 2 || seen[0] != "first" || seen[1] != "retry" {
			t.Errorf("the handler saw %v; want [first retry]", seen)
		}
	})
}

// TestHandlerReviewEdges: what a second read of the handler mode found.
// A resumed run that takes fewer steps than the record's (it skips a
// recorded charge) is not answered, it is kept for an operator; Tx after
// the execution ended refuses; a keyless run's Tx is the engine's (its
// Commit and Rollback refused, Begin nests in it, a step's fn reaches the
// step's transaction); a final phase's idem.Answer is its answer. In every
// claim mode.
func TestHandlerReviewEdges(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()

		// Fewer steps on a resumed run.
		p := &payments{db: e.pool, dieWhen: "after-charge"}
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.RunHandler(ctx, e.eng, payOp, request("t", "fewer", "b"), func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, "fewer") })
		}()
		<-done
		e.expireLeases()
		skipping := func(ctx context.Context) (*idem.Response, error) {
			if _, err := idem.Local(ctx, e.pool, "record", func(context.Context, pgx.Tx) (int, error) { return 7, nil }); err != nil {
				return nil, err
			}
			return created(`{"charged":false}`), nil // decided afresh: no charge
		}
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "fewer", "b"), skipping); err == nil || !strings.Contains(err.Error(), "same steps in the same order") {
			t.Errorf("a resumed run that skips a recorded step: %v; want it refused as unresumable", err)
		}

		// Tx after the execution ended.
		var kept context.Context
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "kept", "b"), func(ctx context.Context) (*idem.Response, error) {
			kept = ctx
			return created(`{}`), nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := idem.Tx(kept); err == nil {
			t.Error("Tx after the execution ended gave a transaction")
		}

		// Keyless: Tx's Commit and Rollback refused, Begin nested, a
		// step's fn in its step's transaction.
		keyless, err := idem.RunHandlerWithoutKey(ctx, e.eng, func(ctx context.Context) (*idem.Response, error) {
			tx, err := idem.Tx(ctx)
			if err != nil {
				return nil, err
			}
			if err := tx.Rollback(ctx); err == nil {
				return nil, errors.New("the keyless Tx's Rollback was not refused")
			}
			if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('keyless')`); err != nil {
				return nil, err
			}
			nested, err := idem.Begin(ctx, e.pool)
			if err != nil {
				return nil, err
			}
			// In the same transaction: it sees the row, and locks nothing
			// against it.
			var n int
			if err := nested.QueryRow(ctx, `SELECT count(*) FROM rows WHERE key = 'keyless'`).Scan(&n); err != nil || n != 1 {
				return nil, fmt.Errorf("Begin is not in the final transaction: %d, %v", n, err)
			}
			if err := nested.Commit(ctx); err != nil {
				return nil, err
			}
			return created(`{}`), nil
		})
		if err != nil || keyless.Status != 201 {
			t.Errorf("keyless: %v, %v", keyless, err)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'keyless'`); n != 1 {
			t.Errorf("keyless: %d rows, want 1", n)
		}
		plain := &payments{db: e.pool}
		if _, err := idem.Local(ctx, e.pool, "s", func(ctx context.Context, tx pgx.Tx) (int, error) {
			if got, err := idem.Tx(ctx); err != nil || got != tx {
				return 0, fmt.Errorf("a plain step's fn reaches %v (%v), not its transaction", got, err)
			}
			return 1, nil
		}); err != nil {
			t.Error(err)
		}
		_ = plain

		// A final phase's Answer.
		phases := []idem.Phase[payState]{{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
			return nil, idem.Answer(&idem.Response{Status: 404, Body: []byte(`{}`)})
		}}}
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "final-answer", "b"), phases)
		if err != nil || out.Response.Status != 404 {
			t.Errorf("a final phase's Answer: %v, %v; want its 404", out, err)
		}
	})
}

// TestHandlerFailedStepLeavesNothingAtItsIndex: a step whose function
// fails records nothing, and takes no place in the record. The primary
// card is declined and the handler charges the backup card, then dies
// before answering: the retry, whose primary card is declined again (the
// same step outcomes), resumes, gets the backup's recorded charge without a
// second call, and answers. A step that fails and is taken again under the
// same name in the same run (a retry inside the handler) is one step. A
// resumed run whose failed step now succeeds, while the record went
// another way, is kept for an operator, not answered. In every claim mode.
func TestHandlerFailedStepLeavesNothingAtItsIndex(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		declined := errors.New("card declined")
		var primaryCalls, backupCalls atomic.Int32
		primaryOK := false
		die := true
		fallback := func(ctx context.Context) (*idem.Response, error) {
			card, err := idem.Foreign(ctx, "charge-primary", func(context.Context, string) (string, error) {
				primaryCalls.Add(1)
				if !primaryOK {
					return "", declined
				}
				return "primary", nil
			})
			if errors.Is(err, declined) {
				card, err = idem.Foreign(ctx, "charge-backup", func(context.Context, string) (string, error) {
					backupCalls.Add(1)
					return "backup", nil
				})
			}
			if err != nil {
				return nil, err
			}
			if die {
				runtime.Goexit()
			}
			return created(`{"card":"` + card + `"}`), nil
		}
		run := func(key string, h idem.Handler) (*idem.Outcome, error) {
			var out *idem.Outcome
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				out, err = idem.RunHandler(ctx, e.eng, payOp, request("t", key, "b"), h)
			}()
			<-done
			return out, err
		}
		run("fallback", fallback)
		if primaryCalls.Load() != 1 || backupCalls.Load() != 1 {
			t.Fatalf("before the crash: %d primary, %d backup calls; want 1 and 1", primaryCalls.Load(), backupCalls.Load())
		}
		e.expireLeases()
		die = false
		out, err := run("fallback", fallback)
		if err != nil || out == nil || !out.Resumed || string(out.Response.Body) != `{"card":"backup"}` {
			t.Fatalf("the retry with the same step outcomes: %+v, %v; want a resumed 201 with the backup card", out, err)
		}
		if backupCalls.Load() != 1 {
			t.Errorf("%d backup charges, want 1: the recorded step ran again", backupCalls.Load())
		}

		// A step retried in the same run, then a crash, then the retry.
		var tries, writes atomic.Int32
		retrying := func(ctx context.Context) (*idem.Response, error) {
			var n int
			var err error
			for range 3 {
				n, err = idem.Local(ctx, e.pool, "reserve", func(ctx context.Context, tx pgx.Tx) (int, error) {
					if tries.Add(1) == 1 {
						return 0, errors.New("serialization failure")
					}
					writes.Add(1)
					_, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ('retried', 'reserved')`)
					return 5, err
				})
				if err == nil {
					break
				}
			}
			if err != nil {
				return nil, err
			}
			if _, err := idem.Foreign(ctx, "notify", func(context.Context, string) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			if die {
				runtime.Goexit()
			}
			return created(fmt.Sprintf(`{"n":%d}`, n)), nil
		}
		die = true
		run("retried", retrying)
		e.expireLeases()
		die = false
		out, err = run("retried", retrying)
		if err != nil || out == nil || string(out.Response.Body) != `{"n":5}` {
			t.Fatalf("a step retried inside its run, resumed: %+v, %v; want 201 {\"n\":5}", out, err)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'retried'`); n != 1 || writes.Load() != 1 {
			t.Errorf("%d rows, %d writes; want 1 and 1", n, writes.Load())
		}

		// The failed step succeeds on the retry: the record charged the
		// backup, this run would not. Kept for an operator.
		primaryCalls.Store(0)
		backupCalls.Store(0)
		primaryOK, die = false, true
		run("diverged", fallback)
		e.expireLeases()
		primaryOK, die = true, false
		_, err = run("diverged", fallback)
		var ie *idem.Error
		if !errors.As(err, &ie) || ie.Kind != idemtype.KindFailed || !strings.Contains(err.Error(), "same steps in the same order") {
			t.Fatalf("a resumed run whose failed step now succeeds: %v; want it kept for an operator", err)
		}

		// A step that never failed where the record holds another is
		// refused before it runs: no call of another system the record
		// never decided on.
		primaryOK, die = false, true
		run("other-path", fallback)
		e.expireLeases()
		var wallet atomic.Int32
		_, err = run("other-path", func(ctx context.Context) (*idem.Response, error) {
			if _, err := idem.Foreign(ctx, "charge-wallet", func(context.Context, string) (int, error) { return int(wallet.Add(1)), nil }); err != nil {
				return nil, err
			}
			return created(`{}`), nil
		})
		if !strings.Contains(fmt.Sprint(err), "same steps in the same order") || wallet.Load() != 0 {
			t.Fatalf("a resumed run taking a step the record never saw fail there: %v, %d calls; want it refused before the call", err, wallet.Load())
		}
	})
}

// TestHandlerReadsAndBeginTx: a read before the first step goes through
// idem.Read and leaves the steps possible (idem.DB there would begin the
// final transaction); after the final transaction began, Read sees what
// the handler wrote in it. idem.BeginTx with the zero options is Begin's
// savepoint; with options, in an execution, it is refused saying why, and
// outside one it begins on the pool with them, as the plain code did. In
// every claim mode (a handler's auto is first under an engine's last).
func TestHandlerReadsAndBeginTx(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		h := func(ctx context.Context) (*idem.Response, error) {
			var n int
			if err := idem.Read(ctx, e.pool).QueryRow(ctx, `SELECT count(*) FROM rows`).Scan(&n); err != nil {
				return nil, err
			}
			if _, err := idem.Local(ctx, e.pool, "reserve", func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			if _, err := idem.BeginTx(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.Serializable}); err == nil || !strings.Contains(err.Error(), "take no isolation level") {
				return nil, fmt.Errorf("BeginTx with options in an execution: %v; want it refused", err)
			}
			tx, err := idem.BeginTx(ctx, e.pool, pgx.TxOptions{})
			if err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('read')`); err != nil {
				return nil, err
			}
			if err := tx.Commit(ctx); err != nil {
				return nil, err
			}
			if err := idem.Read(ctx, e.pool).QueryRow(ctx, `SELECT count(*) FROM rows WHERE key = 'read'`).Scan(&n); err != nil || n != 1 {
				return nil, fmt.Errorf("Read after the final transaction began: %d rows, %v; want its own write", n, err)
			}
			return created(`{}`), nil
		}
		if _, err := idem.RunHandler(ctx, e.eng, payOp, request("t", "read", "b"), h); err != nil {
			t.Fatal(err)
		}
		tx, err := idem.BeginTx(ctx, e.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('plain')`); err == nil {
			t.Error("BeginTx outside an execution did not apply its options (a read-only transaction wrote)")
		}
	})
}
