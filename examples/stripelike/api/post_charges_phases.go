package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes PostCharges's phases, the assertion
// below stops compiling until these methods match PostChargesPhases again.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// PostChargesState is what the phases of PostCharges hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type PostChargesState struct {
	ChargeID string
	Created  int64
	Paid     bool
}

// PostChargesImpl implements PostChargesPhases. Put its dependencies here.
type PostChargesImpl struct {
	Network Network
}

var _ PostChargesPhases = (*PostChargesImpl)(nil)

// Prepare records the charge, pending, under a new id.
func (p *PostChargesImpl) Prepare(ctx context.Context, tx pgx.Tx, request PostChargesRequestObject, state *PostChargesState) error {
	if request.Body == nil || request.Body.Amount < 1 {
		return idem.Release(errInvalid("amount", "amount must be a positive integer, in the currency's smallest unit"))
	}
	state.ChargeID, state.Created = newID("ch_"), time.Now().Unix()
	_, err := tx.Exec(ctx, `INSERT INTO charges (id, amount, currency, customer, status, created) VALUES ($1, $2, $3, $4, 'pending', $5)`,
		state.ChargeID, request.Body.Amount, request.Body.Currency, request.Body.Customer, state.Created)
	return err
}

// Authorize asks the card network for the amount, under key: the network
// charges once per key, whichever attempt reaches it.
func (p *PostChargesImpl) Authorize(ctx context.Context, key string, request PostChargesRequestObject, state *PostChargesState) error {
	paid, err := p.Network.Authorize(ctx, key, request.Body.Amount, request.Body.Currency)
	state.Paid = paid
	return err
}

// Finish records the network's answer and answers the charge.
func (p *PostChargesImpl) Finish(ctx context.Context, tx pgx.Tx, request PostChargesRequestObject, state *PostChargesState) (PostChargesResponseObject, error) {
	status := Succeeded
	if !state.Paid {
		status = Failed
	}
	if _, err := tx.Exec(ctx, `UPDATE charges SET status = $2 WHERE id = $1`, state.ChargeID, string(status)); err != nil {
		return nil, err
	}
	return PostCharges200JSONResponse{Id: state.ChargeID, Object: ChargeObjectCharge, Amount: request.Body.Amount,
		Currency: request.Body.Currency, Customer: request.Body.Customer, Status: status, Paid: state.Paid, Created: state.Created}, nil
}
