package api

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/runtime/idem"
)

// CreatePaymentState is what the phases of createPayment hand to each other,
// saved as JSON with each local phase's commit.
type CreatePaymentState struct {
	PaymentID int64  `json:"payment_id"`
	ChargeID  string `json:"charge_id,omitempty"`
	Declined  bool   `json:"declined,omitempty"`
}

// CreatePaymentImpl charges cards through the card network.
type CreatePaymentImpl struct {
	Cards *cardnet.Client
	// UnsafeFreshKeys sends the card network a new key on every attempt
	// instead of the derived one. It exists only so the chaos harness can
	// show that its checker catches the duplicate charges this causes.
	UnsafeFreshKeys bool
}

var _ CreatePaymentPhases = (*CreatePaymentImpl)(nil)

// RecordPayment inserts the payment as pending.
func (p *CreatePaymentImpl) RecordPayment(ctx context.Context, tx pgx.Tx, request CreatePaymentRequestObject, state *CreatePaymentState) error {
	b := request.Body
	if b.Amount <= 0 || len(b.Currency) != 3 || b.Customer == "" {
		// Nothing happened yet: free the key so a corrected request can use it.
		return idem.Release(echo.NewHTTPError(http.StatusBadRequest, "amount must be positive, currency three letters, customer set"))
	}
	return tx.QueryRow(ctx, `INSERT INTO payments (account, amount, currency, customer, status)
VALUES ($1, $2, $3, $4, 'pending') RETURNING id`, Account(ctx), b.Amount, b.Currency, b.Customer).Scan(&state.PaymentID)
}

// ChargeCard charges the card under the derived key, so a resumed execution
// gets the same charge back instead of a second one.
func (p *CreatePaymentImpl) ChargeCard(ctx context.Context, key string, request CreatePaymentRequestObject, state *CreatePaymentState) error {
	b := request.Body
	if p.UnsafeFreshKeys {
		//idemgen:ignore the chaos harness sends fresh keys on purpose, to show its checker catches the duplicate charges
		key = fmt.Sprintf("unsafe-%d", rand.Int64())
	}
	ch, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: b.Amount, Currency: b.Currency, Customer: b.Customer, Account: Account(ctx)})
	switch {
	case errors.Is(err, cardnet.ErrDeclined):
		state.Declined = true
		return nil
	case err != nil:
		return err // unknown outcome: the record waits at record_payment for a retry
	}
	state.ChargeID = ch.ID
	return nil
}

// Finish settles the payment, queues the receipt, and answers 201, or 402
// for a declined card: a business outcome stored and replayed like a success.
func (p *CreatePaymentImpl) Finish(ctx context.Context, tx pgx.Tx, request CreatePaymentRequestObject, state *CreatePaymentState) (CreatePaymentResponseObject, error) {
	b := request.Body
	if state.Declined {
		if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'declined' WHERE account = $1 AND id = $2`, Account(ctx), state.PaymentID); err != nil {
			return nil, err
		}
		return CreatePayment402ApplicationProblemPlusJSONResponse(problem(402, "card-declined", "The card was declined",
			fmt.Sprintf("payment %d was not charged", state.PaymentID))), nil
	}
	if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'succeeded', charge_id = $3 WHERE account = $1 AND id = $2`, Account(ctx), state.PaymentID, state.ChargeID); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (account, payment_id, recipient, subject, body) VALUES ($1, $2, $3, $4, $5)`,
		Account(ctx), state.PaymentID, b.Customer, fmt.Sprintf("Receipt for payment %d", state.PaymentID),
		fmt.Sprintf("We charged %d %s (charge %s).", b.Amount, b.Currency, state.ChargeID)); err != nil {
		return nil, err
	}
	location := fmt.Sprintf("/payments/%d", state.PaymentID)
	charge := state.ChargeID
	return CreatePayment201JSONResponse{
		Body: Payment{Id: state.PaymentID, Amount: b.Amount, Currency: b.Currency, Customer: b.Customer,
			Status: Succeeded, ChargeId: &charge},
		Headers: CreatePayment201ResponseHeaders{Location: &location},
	}, nil
}
