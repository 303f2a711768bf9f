package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createCharge's phases, the assertion
// below stops compiling until these methods match CreateChargePhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreateChargeState]{
//		Operation: CreateChargeOperation(),
//		Phases: func() []idem.Phase[CreateChargeState] {
//			return CreateChargePhaseList(&CreateChargeImpl{}, request)
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

// CreateChargeState is what the phases of createCharge hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateChargeState struct {
}

// CreateChargeImpl implements CreateChargePhases. Put its dependencies here.
type CreateChargeImpl struct {
}

var _ CreateChargePhases = (*CreateChargeImpl)(nil)

// Reserve is phase 1 of 3 ("reserve"), local: it runs in tx, whose commit also records this phase
// as done and saves state.
func (p *CreateChargeImpl) Reserve(ctx context.Context, tx pgx.Tx, request CreateChargeRequestObject, state *CreateChargeState) error {
	return idem.ErrNotImplemented
}

// Authorize is phase 2 of 3 ("authorize"), foreign: it runs outside any transaction. Send key as
// the other system's idempotency key; it is the same on every retry. What it writes into state is
// saved by the next phase's commit.
func (p *CreateChargeImpl) Authorize(ctx context.Context, key string, request CreateChargeRequestObject, state *CreateChargeState) error {
	return idem.ErrNotImplemented
}

// Capture is phase 3 of 3 ("capture"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateChargeImpl) Capture(ctx context.Context, tx pgx.Tx, request CreateChargeRequestObject, state *CreateChargeState) (CreateChargeResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
