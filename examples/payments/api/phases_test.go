package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// The phase tests: each operation's phases, bound to one request as the
// generated glue binds them, run through idemtest.Check's scenarios
// (crashes at every recovery point and around the card network's call, a
// takeover, concurrent duplicates; bursts under different keys where an
// invariant says what must hold). docs/testing.md explains them.

// cards is the fake card network on httptest, telling rec what each
// attempt sends under its key.
func cards(t *testing.T) (*cardnet.Client, *idemtest.Recorder) {
	rec := idemtest.NewRecorder()
	srv := httptest.NewServer(cardnet.New(cardnet.Options{OnRequest: func(key string, req cardnet.Request) { rec.Call(key, req) }}))
	t.Cleanup(srv.Close)
	return &cardnet.Client{URL: srv.URL, HTTP: srv.Client()}, rec
}

// withPayment makes the tables and a succeeded payment of 1000 of acct_1,
// charged as ch_1.
func withPayment(ctx context.Context, pool *pgxpool.Pool) error {
	if err := api.Migrate(ctx, pool); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `INSERT INTO payments (account, amount, currency, customer, status, charge_id)
VALUES ('acct_1', 1000, 'EUR', 'ada@example.com', 'succeeded', 'ch_1')`)
	return err
}

// volatile are the columns that two correct runs fill differently.
var volatile = []string{"created_at", "settled_at", "applied_at"}

func TestCreatePaymentPhases(t *testing.T) {
	t.Parallel()
	client, rec := cards(t)
	request := api.CreatePaymentRequestObject{Body: &api.NewPayment{Amount: 1000, Currency: "EUR", Customer: "ada@example.com"}}
	idemtest.Check(t, idemtest.Case[api.CreatePaymentState]{
		Operation: api.CreatePaymentOperation(),
		Scope:     "acct_1",
		Setup:     api.Migrate,
		Phases: func() []idem.Phase[api.CreatePaymentState] {
			return api.CreatePaymentPhaseList(&api.CreatePaymentImpl{Cards: client}, request)
		},
		Recorder: rec,
		Volatile: volatile,
	})
}

// refundCase refunds 600 of a succeeded payment of 1000 with phases, never
// refunding a payment beyond its amount.
func refundCase(phases api.CreateRefundPhases) idemtest.Case[api.CreateRefundState] {
	request := api.CreateRefundRequestObject{Body: &api.NewRefund{PaymentId: 1, Amount: 600}}
	return idemtest.Case[api.CreateRefundState]{
		Operation: api.CreateRefundOperation(),
		Scope:     "acct_1",
		Setup:     withPayment,
		Phases: func() []idem.Phase[api.CreateRefundState] {
			return api.CreateRefundPhaseList(phases, request)
		},
		Volatile: volatile,
		Invariant: func(ctx context.Context, tx pgx.Tx) error {
			var over []int64
			rows, err := tx.Query(ctx, `SELECT p.id FROM payments p
WHERE (SELECT coalesce(sum(r.amount), 0) FROM refunds r WHERE r.account = p.account AND r.payment_id = p.id) > p.amount`)
			if err != nil {
				return err
			}
			if over, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
				return err
			}
			if len(over) > 0 {
				return fmt.Errorf("payments %v are refunded beyond their amount", over)
			}
			return nil
		},
	}
}

func TestCreateRefundPhases(t *testing.T) {
	t.Parallel()
	idemtest.Check(t, refundCase(&api.CreateRefundImpl{}))
}

// TestCheckCatchesTheRefundRace: the refund as it once was, reading what
// was refunded in the statement that locks the payment (from the snapshot
// taken before it waited for the lock), refunds a payment beyond its amount
// when refunds under different keys arrive together; the check says so.
func TestCheckCatchesTheRefundRace(t *testing.T) {
	t.Parallel()
	found := idemtest.Findings(t, refundCase(snapshotRefund{}))
	for _, f := range found {
		if f.Rule == idemtest.RuleInvariant && strings.Contains(f.Detail, "refunded beyond their amount") {
			t.Logf("caught: %s", f)
			return
		}
	}
	t.Errorf("the snapshot read was not caught; found %d: %v", len(found), found)
}

// snapshotRefund is the refund phase before the race was fixed.
type snapshotRefund struct{}

func (snapshotRefund) Refund(ctx context.Context, tx pgx.Tx, request api.CreateRefundRequestObject, _ *api.CreateRefundState) (api.CreateRefundResponseObject, error) {
	b := request.Body
	var amount, refunded int64
	var status string
	err := tx.QueryRow(ctx, `SELECT p.amount, p.status, coalesce((SELECT sum(amount) FROM refunds WHERE account = p.account AND payment_id = p.id), 0)
FROM payments p WHERE p.id = $1 AND p.account = $2 FOR UPDATE`, b.PaymentId, api.Account(ctx)).Scan(&amount, &status, &refunded)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return api.CreateRefund404ApplicationProblemPlusJSONResponse{Status: 404, Title: "No such payment", Type: "no-payment"}, nil
	case err != nil:
		return nil, err
	case b.Amount <= 0 || refunded+b.Amount > amount:
		return api.CreateRefund409ApplicationProblemPlusJSONResponse{Status: 409, Title: "The refund exceeds the payment", Type: "too-much"}, nil
	}
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO refunds (account, payment_id, amount) VALUES ($1, $2, $3) RETURNING id`, api.Account(ctx), b.PaymentId, b.Amount).Scan(&id); err != nil {
		return nil, err
	}
	return api.CreateRefund201JSONResponse{Id: id, PaymentId: b.PaymentId, Amount: b.Amount}, nil
}

func TestReceiveCardnetEventPhases(t *testing.T) {
	t.Parallel()
	request := api.ReceiveCardnetEventRequestObject{Body: &api.CardEvent{Id: "evt_1", Type: api.ChargeSucceeded, Created: 1,
		Charge: api.CardCharge{Id: "ch_1", Amount: 1000, Currency: "EUR", Account: "acct_1"}}}
	idemtest.Check(t, idemtest.Case[api.ReceiveCardnetEventState]{
		Operation: api.ReceiveCardnetEventOperation(),
		Scope:     "cardnet",
		Setup:     withPayment,
		Phases: func() []idem.Phase[api.ReceiveCardnetEventState] {
			return api.ReceiveCardnetEventPhaseList(&api.ReceiveCardnetEventImpl{}, request)
		},
		Volatile:         volatile,
		VolatileResponse: []string{"/applied_at"},
	})
}
