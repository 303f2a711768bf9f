package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes cancelOrder's phases, the assertion
// below stops compiling until these methods match CancelOrderPhases again.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// CancelOrderState is what the phases of cancelOrder hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CancelOrderState struct {
}

// CancelOrderImpl implements CancelOrderPhases. Put its dependencies here.
type CancelOrderImpl struct {
}

var _ CancelOrderPhases = (*CancelOrderImpl)(nil)

// Execute is phase 1 of 1 ("execute"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CancelOrderImpl) Execute(ctx context.Context, tx pgx.Tx, request CancelOrderRequestObject, state *CancelOrderState) (CancelOrderResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
