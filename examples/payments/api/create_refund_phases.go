package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CreateRefundState is empty: the operation has a single phase.
type CreateRefundState struct{}

// CreateRefundImpl refunds payments of the caller's account.
type CreateRefundImpl struct{}

var _ CreateRefundPhases = (*CreateRefundImpl)(nil)

// Refund checks what is left to refund and records the refund, in one
// transaction; refusals are stored and replayed like successes.
func (p *CreateRefundImpl) Refund(ctx context.Context, tx pgx.Tx, request CreateRefundRequestObject, state *CreateRefundState) (CreateRefundResponseObject, error) {
	b := request.Body
	// Lock the payment first, then sum its refunds in a statement of its
	// own: under READ COMMITTED each statement sees what committed before
	// it began, so a refund committed while this one waited for the lock is
	// counted. (A sum in the locking statement itself is read from the
	// snapshot taken before the wait, and two concurrent refunds would each
	// see the other's amount as still available.)
	var amount int64
	var status string
	err := tx.QueryRow(ctx, `SELECT amount, status FROM payments WHERE id = $1 AND account = $2 FOR UPDATE`,
		b.PaymentId, Account(ctx)).Scan(&amount, &status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return CreateRefund404ApplicationProblemPlusJSONResponse(problem(404, "no-payment", "No such payment",
			fmt.Sprintf("payment %d does not exist for this account", b.PaymentId))), nil
	case err != nil:
		return nil, err
	case status != "succeeded":
		return CreateRefund409ApplicationProblemPlusJSONResponse(problem(409, "not-refundable", "The payment cannot be refunded",
			fmt.Sprintf("payment %d is %s", b.PaymentId, status))), nil
	}
	var refunded int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM refunds WHERE account = $1 AND payment_id = $2`, Account(ctx), b.PaymentId).Scan(&refunded); err != nil {
		return nil, err
	}
	// Compare against what is left, never refunded+amount: that sum can
	// overflow for an amount near the largest int64.
	if left := amount - refunded; b.Amount <= 0 || b.Amount > left {
		return CreateRefund409ApplicationProblemPlusJSONResponse(problem(409, "too-much", "The refund exceeds the payment",
			fmt.Sprintf("%d of %d is left to refund", left, amount))), nil
	}
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO refunds (account, payment_id, amount) VALUES ($1, $2, $3) RETURNING id`, Account(ctx), b.PaymentId, b.Amount).Scan(&id); err != nil {
		return nil, err
	}
	return CreateRefund201JSONResponse{Id: id, PaymentId: b.PaymentId, Amount: b.Amount}, nil
}
