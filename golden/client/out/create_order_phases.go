package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createOrder's phases, the assertion
// below stops compiling until these methods match CreateOrderPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreateOrderState]{
//		Operation: CreateOrderOperation(),
//		Phases: func() []idem.Phase[CreateOrderState] {
//			return CreateOrderPhaseList(&CreateOrderImpl{}, request)
//		},
//	})
//
// runs them through a crash at every recovery point, a takeover and
// concurrent duplicates, and `go tool idemgen vet ./...` reads them for the
// rules a phase must keep (a local phase writes only through tx, a foreign
// phase sends key and what state holds).

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// CreateOrderState is what the phases of createOrder hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateOrderState struct {
}

// CreateOrderImpl implements CreateOrderPhases. Put its dependencies here.
type CreateOrderImpl struct {
}

var _ CreateOrderPhases = (*CreateOrderImpl)(nil)

// Reserve is phase 1 of 3 ("reserve"), local: it runs in tx, whose commit also records this phase
// as done and saves state.
func (p *CreateOrderImpl) Reserve(ctx context.Context, tx pgx.Tx, request CreateOrderRequestObject, state *CreateOrderState) error {
	return idem.ErrNotImplemented
}

// Charge is phase 2 of 3 ("charge"), foreign: it runs outside any transaction. Send key as the
// other system's idempotency key; it is the same on every retry. What it writes into state is saved
// by the next phase's commit.
func (p *CreateOrderImpl) Charge(ctx context.Context, key string, request CreateOrderRequestObject, state *CreateOrderState) error {
	return idem.ErrNotImplemented
}

// Finish is phase 3 of 3 ("finish"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateOrderImpl) Finish(ctx context.Context, tx pgx.Tx, request CreateOrderRequestObject, state *CreateOrderState) (CreateOrderResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
