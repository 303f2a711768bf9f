package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemcond"
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

// orders is the orders table as idemcond writes it: a row per (account,
// id), the account named in every statement; its version column is the ETag
// of the order's shipping address.
var orders = idemcond.Table{Name: "orders", Key: []string{"account", "id"}}

// PutOrder creates an order under the client's id, once: the id is the
// idempotency key of this naturally idempotent alternative, and a second PUT
// gets 412 Precondition Failed. A PUT without If-None-Match: * never
// reaches it: idemcond.Require answers 428 (NewServer).
func (s *Service) PutOrder(ctx context.Context, request PutOrderRequestObject) (PutOrderResponseObject, error) {
	o := Order{Id: request.Id, Item: request.Body.Item, Quantity: 1}
	if request.Body.Quantity != nil {
		o.Quantity = *request.Body.Quantity
	}
	p, err := idemcond.Parse("", string(request.Params.IfNoneMatch))
	if err == nil {
		err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			_, err := orders.InsertTx(ctx, tx, p, []any{Account(ctx), o.Id}, map[string]any{"item": o.Item, "quantity": o.Quantity})
			return err
		})
	}
	var refused *idemcond.Error
	switch {
	case !errors.As(err, &refused):
		if err != nil {
			return nil, err
		}
		return PutOrder201JSONResponse(o), nil
	case refused.Status == 412:
		return PutOrder412ApplicationProblemPlusJSONResponse(problem(412, "order-exists", "The order exists",
			fmt.Sprintf("order %q was created before; If-None-Match: * forbids replacing it", o.Id))), nil
	case refused.Status == 428:
		return PutOrder428ApplicationProblemPlusJSONResponse(refusal(refused)), nil
	default:
		return PutOrder400ApplicationProblemPlusJSONResponse(refusal(refused)), nil
	}
}

// GetOrderShipping returns where an order ships, with the order's version
// as its ETag: what a PUT of the address sends back as If-Match.
func (s *Service) GetOrderShipping(ctx context.Context, request GetOrderShippingRequestObject) (GetOrderShippingResponseObject, error) {
	var sh Shipping
	var v idemcond.Version
	err := s.Pool.QueryRow(ctx, `SELECT ship_to, version FROM orders WHERE account = $1 AND id = $2`,
		Account(ctx), request.Id).Scan(&sh.Address, &v)
	if errors.Is(err, pgx.ErrNoRows) {
		return GetOrderShipping404ApplicationProblemPlusJSONResponse(noOrder(request.Id)), nil
	}
	if err != nil {
		return nil, err
	}
	return GetOrderShipping200JSONResponse{Body: sh, Headers: GetOrderShipping200ResponseHeaders{ETag: v.ETag()}}, nil
}

// PutOrderShipping changes where an order ships, if the order's version is
// still the one its If-Match names: checked with the row locked, in the
// transaction that writes it, so that of two clients that read the same
// version one writes and the other gets 412, and a delayed retry of an
// older write cannot erase a newer one. A PUT without If-Match never
// reaches it: idemcond.Require answers 428 (NewServer).
func (s *Service) PutOrderShipping(ctx context.Context, request PutOrderShippingRequestObject) (PutOrderShippingResponseObject, error) {
	p, err := idemcond.Parse(request.Params.IfMatch, "")
	var v idemcond.Version
	if err == nil {
		err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) (err error) {
			v, err = orders.UpdateTx(ctx, tx, p, []any{Account(ctx), request.Id}, map[string]any{"ship_to": request.Body.Address})
			return err
		})
	}
	var refused *idemcond.Error
	switch {
	case !errors.As(err, &refused):
		if err != nil {
			return nil, err
		}
		return PutOrderShipping200JSONResponse{Body: *request.Body, Headers: PutOrderShipping200ResponseHeaders{ETag: v.ETag()}}, nil
	case refused.Status == 404:
		return PutOrderShipping404ApplicationProblemPlusJSONResponse(noOrder(request.Id)), nil
	case refused.Status == 412:
		return PutOrderShipping412ApplicationProblemPlusJSONResponse(refusal(refused)), nil
	case refused.Status == 428:
		return PutOrderShipping428ApplicationProblemPlusJSONResponse(refusal(refused)), nil
	default:
		return PutOrderShipping400ApplicationProblemPlusJSONResponse(refusal(refused)), nil
	}
}

func noOrder(id string) Problem {
	return problem(404, "no-order", "No such order", fmt.Sprintf("order %q does not exist for this account", id))
}

// refusal is idemcond's problem as the spec's Problem.
func refusal(e *idemcond.Error) Problem {
	p := e.Problem()
	return Problem{Type: p.Type, Title: p.Title, Status: p.Status, Detail: &p.Detail}
}
