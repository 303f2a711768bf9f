package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes PostCharges's phases, the assertion
// below stops compiling until these methods match PostChargesPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[PostChargesState]{
//		Operation: PostChargesOperation(),
//		Phases: func() []idem.Phase[PostChargesState] {
//			return PostChargesPhaseList(&PostChargesImpl{}, request)
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

// PostChargesState is what the phases of PostCharges hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type PostChargesState struct {
}

// PostChargesImpl implements PostChargesPhases. Put its dependencies here.
type PostChargesImpl struct {
}

var _ PostChargesPhases = (*PostChargesImpl)(nil)

// Prepare is phase 1 of 3 ("prepare"), local: it runs in tx, whose commit also records this phase
// as done and saves state.
func (p *PostChargesImpl) Prepare(ctx context.Context, tx pgx.Tx, request PostChargesRequestObject, state *PostChargesState) error {
	return idem.ErrNotImplemented
}

// Authorize is phase 2 of 3 ("authorize"), foreign: it runs outside any transaction. Send key as
// the other system's idempotency key; it is the same on every retry. What it writes into state is
// saved by the next phase's commit.
func (p *PostChargesImpl) Authorize(ctx context.Context, key string, request PostChargesRequestObject, state *PostChargesState) error {
	return idem.ErrNotImplemented
}

// Finish is phase 3 of 3 ("finish"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *PostChargesImpl) Finish(ctx context.Context, tx pgx.Tx, request PostChargesRequestObject, state *PostChargesState) (PostChargesResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
