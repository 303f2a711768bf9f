package idemtest_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// handlerPayment is the payment as one handler with inline steps: it
// records the payment (idem.Local), charges the card (idem.Foreign), and
// writes the charge in a transaction begun with idem.Begin, as the plain
// handler did with pool.Begin. The fields break it one way each.
type handlerPayment struct {
	pool  *pgxpool.Pool
	cards *cards
	// the broken variants
	poolWrite, clockAmount bool
	// coinSteps takes an extra first step on every other run: what a
	// handler that decides its steps from the clock or a live read does.
	coinSteps *atomic.Int32
	// validate reads before the first step, to validate the request:
	// "db" through idem.DB (which begins the final transaction: the steps
	// after it fail), "read" through idem.Read (its place).
	validate string
}

func (p *handlerPayment) handle(ctx context.Context, amount int64) (*idem.Response, error) {
	if p.validate != "" {
		q := idem.Read(ctx, p.pool)
		if p.validate == "db" {
			q = idem.DB(ctx, p.pool)
		}
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM refund WHERE amount = $1`, amount).Scan(&n); err != nil {
			return nil, err
		}
	}
	if p.coinSteps != nil && p.coinSteps.Add(1)%2 == 1 {
		// Decided afresh on every run: a resumed run takes other steps.
		if _, err := idem.Local(ctx, p.pool, "audit-first", func(ctx context.Context, tx pgx.Tx) (int, error) { return 0, nil }); err != nil {
			return nil, err
		}
	}
	id, err := idem.Local(ctx, p.pool, "record", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO pay (amount) VALUES ($1) RETURNING id`, amount).Scan(&id)
		return id, err
	})
	if err != nil {
		return nil, err
	}
	charge, err := idem.Foreign(ctx, "charge", func(ctx context.Context, key string) (string, error) {
		a := amount
		if p.clockAmount {
			a += time.Now().UnixNano()%1000 + 1
		}
		return p.cards.charge(key, a), nil
	})
	if err != nil {
		return nil, err
	}
	tx, err := idem.Begin(ctx, p.pool)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE pay SET charge = $2 WHERE id = $1`, id, charge); err != nil {
		return nil, err
	}
	exec := tx.Exec
	if p.poolWrite {
		exec = p.pool.Exec
	}
	if _, err := exec(ctx, `INSERT INTO audit (pay_id, what) VALUES ($1, 'charged')`, id); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: fmt.Appendf(nil, `{"id":%d,"charge":%q}`, id, charge)}, nil
}

func handlerCase(claim idem.ClaimMode, impl func(*pgxpool.Pool) *handlerPayment) idemtest.Case[struct{}] {
	cd := newCards()
	var pool *pgxpool.Pool
	return idemtest.Case[struct{}]{
		Operation: &idem.Operation{ID: "createPayment", Policy: idem.Policy{Lease: 10 * time.Second, Claim: claim, ReplayHeaders: []string{"Content-Type"}}},
		Scope:     "acct_1",
		Setup: func(ctx context.Context, p *pgxpool.Pool) error {
			pool = p
			return setup(ctx, p)
		},
		Handler: func() idem.Handler {
			p := impl(pool)
			p.pool, p.cards = pool, cd
			return func(ctx context.Context) (*idem.Response, error) { return p.handle(ctx, 1000) }
		},
		Recorder: cd.rec,
		Volatile: []string{"created_at"},
	}
}

// TestCheckPassesAHandler: the handler with inline steps passes every
// scenario (crashes inside and after each step and inside its final
// transaction, a takeover while the card call hangs, duplicates), in each
// claim mode that runs steps; and a handler without steps, one
// transaction, in all of them.
func TestCheckPassesAHandler(t *testing.T) {
	t.Parallel()
	for _, claim := range []idem.ClaimMode{idem.ClaimAuto, idem.ClaimFirst, idem.ClaimSeparate} {
		t.Run(cmp.Or(string(claim), "auto")+"/steps", func(t *testing.T) {
			t.Parallel()
			idemtest.Check(t, handlerCase(claim, func(*pgxpool.Pool) *handlerPayment { return &handlerPayment{} }))
		})
		t.Run(cmp.Or(string(claim), "auto")+"/read-first", func(t *testing.T) {
			t.Parallel()
			idemtest.Check(t, handlerCase(claim, func(*pgxpool.Pool) *handlerPayment { return &handlerPayment{validate: "read"} }))
		})
	}
	for _, claim := range []idem.ClaimMode{idem.ClaimAuto, idem.ClaimFirst, idem.ClaimSeparate, idem.ClaimLast} {
		t.Run(cmp.Or(string(claim), "auto")+"/one-transaction", func(t *testing.T) {
			t.Parallel()
			c := refundCase(true)
			c.Operation = &idem.Operation{ID: "createRefund", Policy: idem.Policy{Lease: 10 * time.Second, Claim: claim}}
			refund := refundPhases(true)[0].Final
			c.Phases = nil
			c.Handler = func() idem.Handler {
				return func(ctx context.Context) (*idem.Response, error) {
					tx, err := idem.Tx(ctx)
					if err != nil {
						return nil, err
					}
					return refund(ctx, tx, nil)
				}
			}
			idemtest.Check(t, c)
		})
	}
}

// TestCheckCatchesABrokenHandler: each broken variant is caught, naming
// the step and the rule.
func TestCheckCatchesABrokenHandler(t *testing.T) {
	t.Parallel()
	runs := new(atomic.Int32)
	for _, tc := range []struct {
		name     string
		impl     func(*pgxpool.Pool) *handlerPayment
		scenario string
		phase    string
		rule     idemtest.Rule
		says     string
	}{
		{"the final write goes through the pool", func(*pgxpool.Pool) *handlerPayment { return &handlerPayment{poolWrite: true} },
			"crash inside handler", "handler", idemtest.RuleRows, "writes outlived the phase's rolled-back transaction"},
		{"a foreign call's amount comes from the clock", func(*pgxpool.Pool) *handlerPayment { return &handlerPayment{clockAmount: true} },
			"", "charge", idemtest.RuleForeignParams, "field /amount = "},
		{"the steps are decided afresh on every run", func(*pgxpool.Pool) *handlerPayment { return &handlerPayment{coinSteps: runs} },
			"crash inside record", "record", idemtest.RuleFailed, "same steps in the same order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			found := idemtest.Findings(t, handlerCase(idem.ClaimAuto, tc.impl))
			for _, f := range found {
				if strings.Contains(f.Scenario, tc.scenario) && f.Phase == tc.phase && f.Rule == tc.rule && strings.Contains(f.Detail, tc.says) {
					t.Logf("caught: %s", f)
					return
				}
			}
			t.Errorf("no finding of rule %q in scenario %q, step %s, saying %q; found %d:\n%s", tc.rule, tc.scenario, tc.phase, tc.says, len(found), list(found))
		})
	}
}

// fatalTB is a testing.TB whose Fatalf is recorded, for a test that
// shows Check failing another test.
type fatalTB struct {
	testing.TB
	fatal string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestCheckCatchesAReadBeforeTheSteps: a handler that validates its
// request through idem.DB before its first step begins its final
// transaction there, and the step after it fails: Check fails the test at
// once, with the rule's words (idemgen vet cannot see it when the
// database sits behind an interface). Through idem.Read, the same handler
// passes (TestCheckPassesAHandler's read-first).
func TestCheckCatchesAReadBeforeTheSteps(t *testing.T) {
	t.Parallel()
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		idemtest.Findings(tb, handlerCase(idem.ClaimAuto, func(*pgxpool.Pool) *handlerPayment { return &handlerPayment{validate: "db"} }))
	}()
	<-done
	if !strings.Contains(tb.fatal, `step "record" taken after the handler began its final transaction`) {
		t.Errorf("Check on a handler that reads through idem.DB before its steps: %q; want it failed naming the rule", tb.fatal)
	}
}

// reportPhases answer a report about a payment and render it again from
// its id; broken, the render answers another id.
func reportPhases(brokenRender bool) []idem.Phase[struct{}] {
	return []idem.Phase[struct{}]{{
		Name: "report",
		Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO pay (amount) VALUES (1000) RETURNING id`).Scan(&id); err != nil {
				return nil, err
			}
			return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: fmt.Appendf(nil, `{"id":%d,"amount":1000}`, id)}, nil
		},
		Render: func(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
			id, err := ref.Int64("/id")
			if err != nil {
				return nil, err
			}
			if brokenRender {
				id++
			}
			return &idem.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: fmt.Appendf(nil, `{"id":%d,"amount":1000}`, id)}, nil
		},
	}}
}

// TestCheckComparesARenderedReplay: for an operation that renders its
// replays, Check compares a replay with the answer on what a render keeps
// (status, replay headers, the render pointers): a correct render passes,
// one that answers another id is caught.
func TestCheckComparesARenderedReplay(t *testing.T) {
	t.Parallel()
	for _, broken := range []bool{false, true} {
		c := idemtest.Case[struct{}]{
			Operation: &idem.Operation{ID: "createReport", Policy: idem.Policy{Lease: 10 * time.Second, Render: []string{"/id"}, ReplayHeaders: []string{"Content-Type"}}},
			Setup:     setup,
			Phases:    func() []idem.Phase[struct{}] { return reportPhases(broken) },
			Volatile:  []string{"created_at"},
		}
		found := idemtest.Findings(t, c)
		caught := false
		for _, f := range found {
			caught = caught || f.Rule == idemtest.RuleResponse && strings.Contains(f.Detail, "rendered replay's /id is 2; the answer's was 1")
		}
		switch {
		case !broken && len(found) > 0:
			t.Errorf("a correct render: %d findings:\n%s", len(found), list(found))
		case broken && !caught:
			t.Errorf("a render that answers another id was not caught; found:\n%s", list(found))
		}
	}
}

// TestCheckComparesRenderedIDsExactly: a render that reads a 64-bit id
// through a float64 renders 1234567890123456768 for 1234567890123456789,
// another resource; Check compares the ids as the answers wrote them, so
// it is caught.
func TestCheckComparesRenderedIDsExactly(t *testing.T) {
	t.Parallel()
	phases := reportPhases(false)
	phases[0].Render = func(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
		var id float64
		if err := ref.Decode("/id", &id); err != nil {
			return nil, err
		}
		return &idem.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: fmt.Appendf(nil, `{"id":%.0f,"amount":1000}`, id)}, nil
	}
	found := idemtest.Findings(t, idemtest.Case[struct{}]{
		Operation: &idem.Operation{ID: "createReport", Policy: idem.Policy{Lease: 10 * time.Second, Render: []string{"/id"}, ReplayHeaders: []string{"Content-Type"}}},
		Setup: func(ctx context.Context, pool *pgxpool.Pool) error {
			if err := setup(ctx, pool); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, `ALTER SEQUENCE pay_id_seq RESTART WITH 1234567890123456789`)
			return err
		},
		Phases:   func() []idem.Phase[struct{}] { return phases },
		Volatile: []string{"created_at"},
	})
	for _, f := range found {
		if f.Rule == idemtest.RuleResponse && strings.Contains(f.Detail, "rendered replay's /id is 1234567890123456768; the answer's was 1234567890123456789") {
			return
		}
	}
	t.Errorf("a render that rounds a 64-bit id was not caught; found:\n%s", list(found))
}

// TestCheckPassesAPhaseThatAnswers: a phase that answers early
// (idem.Answer) for this request passes Check: its scenarios stop at the
// phase the clean execution reached.
func TestCheckPassesAPhaseThatAnswers(t *testing.T) {
	t.Parallel()
	idemtest.Check(t, idemtest.Case[struct{}]{
		Operation: &idem.Operation{ID: "createRefund", Policy: idem.Policy{Lease: 10 * time.Second}},
		Setup:     setup,
		Phases: func() []idem.Phase[struct{}] {
			return []idem.Phase[struct{}]{
				{Name: "find", Local: func(ctx context.Context, tx pgx.Tx, _ *struct{}) error {
					var n int
					if err := tx.QueryRow(ctx, `SELECT count(*) FROM pay`).Scan(&n); err != nil {
						return err
					}
					if n == 0 {
						return idem.Answer(&idem.Response{Status: http.StatusNotFound, Body: []byte(`{"title":"no payment"}`)})
					}
					return nil
				}},
				{Name: "refund", Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
					return &idem.Response{Status: http.StatusCreated}, nil
				}},
			}
		},
	})
}
