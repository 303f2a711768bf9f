package idemtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// The shapes below are what generated phase lists look like for a payment
// (record, charge on a card network, finish) and a refund (one final
// phase); each broken variant breaks one rule of docs/runtime.md's "What
// phase code must keep", and the test says which finding catches it.

const schema = `
CREATE TABLE pay (id bigserial PRIMARY KEY, amount bigint NOT NULL, charge text, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE refund (id bigserial PRIMARY KEY, pay_id bigint NOT NULL REFERENCES pay (id), amount bigint NOT NULL);
CREATE TABLE audit (pay_id bigint NOT NULL, what text NOT NULL);`

func setup(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, schema)
	return err
}

// cards is a fake card network: one charge per key, as a real one keeps
// it, and every request told to the recorder.
type cards struct {
	mu      sync.Mutex
	charges map[string]string
	rec     *idemtest.Recorder
}

func newCards() *cards { return &cards{charges: map[string]string{}, rec: idemtest.NewRecorder()} }

func (c *cards) charge(key string, amount int64) string {
	c.rec.Call(key, map[string]any{"amount": amount})
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.charges[key]; ok {
		return id
	}
	id := fmt.Sprintf("ch_%d", len(c.charges)+1)
	c.charges[key] = id
	return id
}

type payState struct {
	PayID    int64  `json:"pay_id"`
	Amount   int64  `json:"amount"`
	ChargeID string `json:"charge_id"`
}

// payment is the phases' implementation, with one field per way to break
// them.
type payment struct {
	pool  *pgxpool.Pool
	cards *cards
	// the broken variants
	poolWrite, finishPoolWrite, clockAmount, freshKey, fieldState bool
	payID                                                         int64 // fieldState keeps the id here
}

func (p *payment) phases(amount int64) []idem.Phase[payState] {
	return []idem.Phase[payState]{
		{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, st *payState) error {
			q := tx.QueryRow
			if p.poolWrite {
				q = p.pool.QueryRow // outside the phase's transaction
			}
			var id int64
			if err := q(ctx, `INSERT INTO pay (amount) VALUES ($1) RETURNING id`, amount).Scan(&id); err != nil {
				return err
			}
			if p.fieldState {
				p.payID = id
			} else {
				st.PayID = id
			}
			st.Amount = amount
			return nil
		}},
		{Name: "charge", Foreign: func(ctx context.Context, key string, st *payState) error {
			amount := st.Amount
			if p.clockAmount {
				amount += time.Now().UnixNano()%1000 + 1 // a live price, say
			}
			if p.freshKey {
				key = fmt.Sprintf("k-%d", rand.Int64())
			}
			st.ChargeID = p.cards.charge(key, amount)
			return nil
		}},
		{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, st *payState) (*idem.Response, error) {
			id := st.PayID
			if p.fieldState {
				id = p.payID
			}
			if _, err := tx.Exec(ctx, `UPDATE pay SET charge = $2 WHERE id = $1`, id, st.ChargeID); err != nil {
				return nil, err
			}
			exec := tx.Exec
			if p.finishPoolWrite {
				exec = p.pool.Exec
			}
			if _, err := exec(ctx, `INSERT INTO audit (pay_id, what) VALUES ($1, 'charged')`, id); err != nil {
				return nil, err
			}
			return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
				Body: fmt.Appendf(nil, `{"id":%d,"charge":%q,"at":%q}`, id, st.ChargeID, time.Now().Format(time.RFC3339Nano))}, nil
		}},
	}
}

var payOp = &idem.Operation{ID: "createPayment", Policy: idem.Policy{Lease: 10 * time.Second, ReplayHeaders: []string{"Content-Type"}}}

// paymentCase checks the payment phases built by impl (a new one per
// attempt, as a new process would have).
func paymentCase(t *testing.T, impl func(pool *pgxpool.Pool) *payment) idemtest.Case[payState] {
	return paymentCaseWith(newCards(), impl, 1000)
}

// paymentCaseWith is paymentCase with the card network cd, for amount.
func paymentCaseWith(cd *cards, impl func(pool *pgxpool.Pool) *payment, amount int64) idemtest.Case[payState] {
	var pool *pgxpool.Pool
	return idemtest.Case[payState]{
		Operation: payOp,
		Scope:     "acct_1",
		Setup: func(ctx context.Context, p *pgxpool.Pool) error {
			pool = p
			return setup(ctx, p)
		},
		Phases: func() []idem.Phase[payState] {
			p := impl(pool)
			p.cards = cd
			return p.phases(amount)
		},
		Recorder:         cd.rec,
		Volatile:         []string{"created_at"},
		VolatileResponse: []string{"/at"},
	}
}

func TestCheckPassesCorrectPhases(t *testing.T) {
	t.Parallel()
	idemtest.Check(t, paymentCase(t, func(*pgxpool.Pool) *payment { return &payment{} }))
}

// Each broken variant is caught, with a finding that names the phase and
// the rule.
func TestCheckCatchesBrokenPhases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		impl     func(pool *pgxpool.Pool) *payment
		scenario string
		phase    string
		rule     idemtest.Rule
		says     string
	}{
		{"a local phase writes through the pool", func(pool *pgxpool.Pool) *payment { return &payment{pool: pool, poolWrite: true} },
			"crash inside record", "record", idemtest.RuleRows, "writes outlived the phase's rolled-back transaction"},
		{"a foreign call's amount comes from the clock", func(*pgxpool.Pool) *payment { return &payment{clockAmount: true} },
			"", "charge", idemtest.RuleForeignParams, "field /amount = "},
		{"a foreign phase sends a key of its own", func(*pgxpool.Pool) *payment { return &payment{freshKey: true} },
			"", "charge", idemtest.RuleForeignKey, "not the key the phase was given"},
		{"a phase keeps state outside its state", func(*pgxpool.Pool) *payment { return &payment{fieldState: true} },
			"crash", "finish", idemtest.RuleRows, "table pay"},
		// The stale owner of a takeover wakes after the new owner completed:
		// its final phase's transaction is fenced and rolls back, but not
		// what it wrote through the pool.
		{"a final phase writes through the pool", func(pool *pgxpool.Pool) *payment { return &payment{pool: pool, finishPoolWrite: true} },
			"takeover while charge hangs past the lease", "charge", idemtest.RuleRows, "table audit has 2 rows, the clean execution left 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			found := idemtest.Findings(t, paymentCase(t, tc.impl))
			for _, f := range found {
				if strings.Contains(f.Scenario, tc.scenario) && f.Phase == tc.phase && f.Rule == tc.rule && strings.Contains(f.Detail, tc.says) {
					t.Logf("caught: %s", f)
					return
				}
			}
			t.Errorf("no finding of rule %q in scenario %q, phase %s, saying %q; found %d:\n%s", tc.rule, tc.scenario, tc.phase, tc.says, len(found), list(found))
		})
	}
}

func list(fs []idemtest.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}

// refund is one final phase that refunds part of a payment; checked reads
// what was refunded after locking the payment, as it must, or before (the
// snapshot read that let concurrent refunds under different keys refund
// more than the payment).
func refundPhases(lockFirst bool) []idem.Phase[struct{}] {
	return []idem.Phase[struct{}]{{Name: "refund", Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
		var amount, refunded int64
		sum := func() error {
			return tx.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM refund WHERE pay_id = 1`).Scan(&refunded)
		}
		if !lockFirst {
			if err := sum(); err != nil {
				return nil, err
			}
		}
		if err := tx.QueryRow(ctx, `SELECT amount FROM pay WHERE id = 1 FOR UPDATE`).Scan(&amount); err != nil {
			return nil, err
		}
		if lockFirst {
			if err := sum(); err != nil {
				return nil, err
			}
		}
		if amount-refunded < 600 {
			return &idem.Response{Status: http.StatusConflict, Body: []byte(`{"error":"too much"}`)}, nil
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO refund (pay_id, amount) VALUES (1, 600) RETURNING id`).Scan(&id); err != nil {
			return nil, err
		}
		return &idem.Response{Status: http.StatusCreated, Body: fmt.Appendf(nil, `{"id":%d}`, id)}, nil
	}}}
}

func refundCase(lockFirst bool) idemtest.Case[struct{}] {
	return idemtest.Case[struct{}]{
		Operation: &idem.Operation{ID: "createRefund", Policy: idem.Policy{Lease: 10 * time.Second}},
		Scope:     "acct_1",
		Setup: func(ctx context.Context, pool *pgxpool.Pool) error {
			if err := setup(ctx, pool); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, `INSERT INTO pay (amount, charge) VALUES (1000, 'ch_1')`)
			return err
		},
		Phases:   func() []idem.Phase[struct{}] { return refundPhases(lockFirst) },
		Volatile: []string{"created_at"},
		Invariant: func(ctx context.Context, tx pgx.Tx) error {
			var over int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pay p WHERE (SELECT coalesce(sum(amount), 0) FROM refund r WHERE r.pay_id = p.id) > p.amount`).Scan(&over); err != nil {
				return err
			}
			if over > 0 {
				return errors.New("a payment is refunded beyond its amount")
			}
			return nil
		},
	}
}

func TestCheckPassesALockedRefund(t *testing.T) {
	t.Parallel()
	idemtest.Check(t, refundCase(true))
}

func TestCheckCatchesASnapshotRead(t *testing.T) {
	t.Parallel()
	found := idemtest.Findings(t, refundCase(false))
	for _, f := range found {
		if f.Rule == idemtest.RuleInvariant && strings.Contains(f.Scenario, "under different keys") {
			t.Logf("caught: %s", f)
			return
		}
	}
	t.Errorf("the refund that reads before it locks was not caught; found:\n%s", list(found))
}

// Correct phases that Check once failed, or hung on: each must pass.
func TestCheckPassesCorrectPhasesInEveryShape(t *testing.T) {
	t.Parallel()
	// Three local phases, two of which take serial ids: in record-last and
	// claim-first modes they commit in one transaction, whose rollback
	// leaves the ids of the first two taken.
	orderLines := func(claim idem.ClaimMode) idemtest.Case[payState] {
		return idemtest.Case[payState]{
			Operation: &idem.Operation{ID: "createOrder", Policy: idem.Policy{Lease: 10 * time.Second, Claim: claim}},
			Setup:     setup,
			Phases: func() []idem.Phase[payState] {
				return []idem.Phase[payState]{
					{Name: "create", Local: func(ctx context.Context, tx pgx.Tx, st *payState) error {
						return tx.QueryRow(ctx, `INSERT INTO pay (amount) VALUES (5) RETURNING id`).Scan(&st.PayID)
					}},
					{Name: "lines", Local: func(ctx context.Context, tx pgx.Tx, st *payState) error {
						_, err := tx.Exec(ctx, `INSERT INTO refund (pay_id, amount) VALUES ($1, 1), ($1, 2)`, st.PayID)
						return err
					}},
					{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, st *payState) (*idem.Response, error) {
						var n int64
						if err := tx.QueryRow(ctx, `SELECT max(id) FROM refund`).Scan(&n); err != nil {
							return nil, err
						}
						return &idem.Response{Status: 201, Body: fmt.Appendf(nil, `{"id":%d,"last_line":%d}`, st.PayID, n)}, nil
					}},
				}
			},
			Volatile: []string{"created_at"},
		}
	}
	// A reference made in a local phase and sent by the foreign one: other
	// in every scenario, the same on every attempt within one.
	cd := newCards()
	reference := idemtest.Case[payState]{
		Operation: payOp,
		Setup:     setup,
		Phases: func() []idem.Phase[payState] {
			return []idem.Phase[payState]{
				{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, st *payState) error {
					st.ChargeID = fmt.Sprintf("ref-%d", rand.Int64()) // stored before the call
					return tx.QueryRow(ctx, `INSERT INTO pay (amount) VALUES (1) RETURNING id`).Scan(&st.PayID)
				}},
				{Name: "charge", Foreign: func(ctx context.Context, key string, st *payState) error {
					cd.rec.Call(key, map[string]any{"reference": st.ChargeID})
					return nil
				}},
				{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, st *payState) (*idem.Response, error) {
					return &idem.Response{Status: 201, Body: fmt.Appendf(nil, `{"id":%d}`, st.PayID)}, nil
				}},
			}
		},
		Recorder: cd.rec,
		Volatile: []string{"created_at"},
	}
	// A refund that answers contention with a release (try again later),
	// under more concurrent requests than a pool has connections.
	releasing := refundCase(true)
	releasing.Concurrency = 40
	inner := releasing.Phases
	releasing.Phases = func() []idem.Phase[struct{}] {
		ps := inner()
		final := ps[0].Final
		ps[0].Final = func(ctx context.Context, tx pgx.Tx, s *struct{}) (*idem.Response, error) {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM pay WHERE id = 1 FOR UPDATE NOWAIT`); err != nil {
				return nil, idem.Release(err)
			}
			return final(ctx, tx, s)
		}
		return ps
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) []idemtest.Finding
	}{
		{"serial ids in one record-last transaction", func(t *testing.T) []idemtest.Finding { return idemtest.Findings(t, orderLines(idem.ClaimAuto)) }},
		{"serial ids in one claim-first transaction", func(t *testing.T) []idemtest.Finding { return idemtest.Findings(t, orderLines(idem.ClaimFirst)) }},
		{"serial ids in separate transactions", func(t *testing.T) []idemtest.Finding { return idemtest.Findings(t, orderLines(idem.ClaimSeparate)) }},
		{"a reference stored before the call", func(t *testing.T) []idemtest.Finding { return idemtest.Findings(t, reference) }},
		{"a release under contention", func(t *testing.T) []idemtest.Finding { return idemtest.Findings(t, releasing) }},
		{"two cases of one operation sharing a fake", func(t *testing.T) []idemtest.Finding {
			cd, correct := newCards(), func(*pgxpool.Pool) *payment { return &payment{} }
			found := idemtest.Findings(t, paymentCaseWith(cd, correct, 1000))
			return append(found, idemtest.Findings(t, paymentCaseWith(cd, correct, 500))...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if found := tc.run(t); len(found) > 0 {
				t.Errorf("%d findings on correct phases:\n%s", len(found), list(found))
			}
		})
	}
}
