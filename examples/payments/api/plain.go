package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

var _ PlainHandlers = (*Service)(nil)

// GetPayment returns a payment of the caller's account.
func (s *Service) GetPayment(ctx context.Context, request GetPaymentRequestObject) (GetPaymentResponseObject, error) {
	var p Payment
	var status string
	err := s.Pool.QueryRow(ctx, `SELECT id, amount, currency, customer, status, charge_id FROM payments WHERE id = $1 AND account = $2`,
		request.Id, Account(ctx)).Scan(&p.Id, &p.Amount, &p.Currency, &p.Customer, &status, &p.ChargeId)
	if errors.Is(err, pgx.ErrNoRows) {
		return GetPayment404ApplicationProblemPlusJSONResponse(problem(404, "no-payment", "No such payment",
			fmt.Sprintf("payment %d does not exist for this account", request.Id))), nil
	}
	p.Status = PaymentStatus(status)
	return GetPayment200JSONResponse(p), err
}

// PutOrder creates an order under the client's id, once: the id is the
// idempotency key of this naturally idempotent alternative, and a second PUT
// gets 412 Precondition Failed.
func (s *Service) PutOrder(ctx context.Context, request PutOrderRequestObject) (PutOrderResponseObject, error) {
	o := Order{Id: request.Id, Item: request.Body.Item, Quantity: 1}
	if request.Body.Quantity != nil {
		o.Quantity = *request.Body.Quantity
	}
	tag, err := s.Pool.Exec(ctx, `INSERT INTO orders (account, id, item, quantity) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
		Account(ctx), o.Id, o.Item, o.Quantity)
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() == 0 {
		return PutOrder412ApplicationProblemPlusJSONResponse(problem(412, "order-exists", "The order exists",
			fmt.Sprintf("order %q was created before; If-None-Match: * forbids replacing it", o.Id))), nil
	}
	return PutOrder201JSONResponse(o), nil
}
